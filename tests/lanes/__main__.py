"""python -m tests.lanes [--lanes N] [MODULE ...]: what `bin/test --all` runs after lint and types.

The unit tier first, on every core; then every other module in N lanes (default 3, or
VLLM_RIG_TEST_LANES), lane n on sandbox slot VLLM_RIG_SANDBOX_SLOT + n - 1. Exits 1 when anything failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.lanes import checkout, plan, report, schedule

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / ".sandbox" / "lanes" / "run"  # this run's logs and JUnit files
# Four: with two lanes on a 2-core machine the CPUs sat half idle (vmstat over a whole run: 50% idle; the
# scenarios wait on boots, timers and services); three took the run from 34.6 to 25.5 min, and still left 12%
# idle (download timeouts, watchdog rounds, reboots) when the suite had grown to 33.5 min of lanes; a fourth
# fills those waits (docs/verified.md has the runs).
DEFAULT_LANES = 4


def say(line: str) -> None:
    print(line, flush=True)


def collected(repo: Path) -> list[str]:
    """The modules pytest itself collects outside the unit tier (so the lanes run what `pytest` would)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--ignore", plan.UNIT_TIER]
    run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"lanes: pytest could not collect the tests:\n{run.stdout[-4000:]}{run.stderr[-2000:]}")
    return sorted({line.split("::")[0] for line in run.stdout.splitlines() if "::" in line})


def unit_tier(out: Path) -> tuple[int, list[report.Case]]:
    junit = out / "unit.xml"
    cmd = [sys.executable, "-m", "pytest", "-n", "auto", plan.UNIT_TIER, "-p", "no:cacheprovider"]
    cmd.append(f"--junitxml={junit}")
    rc = subprocess.run(cmd, cwd=REPO).returncode
    return rc, report.cases(junit)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lanes", description=__doc__.split("\n")[0])
    lanes = int(os.environ.get("VLLM_RIG_TEST_LANES") or DEFAULT_LANES)
    ap.add_argument("--lanes", type=int, default=lanes, metavar="N")
    ap.add_argument("modules", nargs="*", help="only these modules, in lanes (no unit tier); default: all")
    args = ap.parse_args(argv)
    if args.lanes < 1:
        ap.error(f"--lanes {args.lanes}: at least 1")
    started = time.monotonic()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    unit_rc, unit_cases = unit_tier(OUT) if not args.modules else (0, [])
    base = int(os.environ.get("VLLM_RIG_SANDBOX_SLOT") or 0)
    lanes = [schedule.Lane(n, base + n - 1, checkout.lay(REPO, n)) for n in range(1, args.lanes + 1)]
    queue = plan.order(args.modules or collected(REPO), plan.seconds(REPO))
    for lane in lanes:
        say(f"lanes: lane {lane.number} on slot {lane.slot} in {lane.root.relative_to(REPO.parent)}")
    say(f"lanes: {len(queue)} modules, longest first (logs in {OUT.relative_to(REPO)})")
    try:
        results = schedule.run(lanes, queue, OUT, say)
    finally:
        for lane in lanes[1:]:  # a copy's machines are the run's own: power them off (lane 1's stay up)
            down = [sys.executable, "-m", "tests.sandbox", "down"]
            subprocess.run(down, cwd=lane.root, env=schedule.lane_env(lane), capture_output=True)
    for line in report.summary(results, unit_cases, time.monotonic() - started):
        say(line)
    report.record(results, REPO / plan.LAST_RUN)
    if unit_rc != 0:
        say(f"lanes: the unit tier failed (pytest exit {unit_rc})")
    return verdict(unit_rc, results)


def verdict(unit_rc: int, results: list[schedule.Result]) -> int:
    """The run's exit code: 0 only when the unit tier and every module passed."""
    return 0 if unit_rc == 0 and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
