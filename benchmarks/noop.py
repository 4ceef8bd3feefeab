"""No-op re-run of the whole deploy against the sandbox: the toolkit's settings against stock pyinfra.

    python -m tests.sandbox up && python benchmarks/noop.py [--runs 5] [--inventory inventory/sandbox.py]

Prints, per variant, the median wall time of `pyinfra -y INVENTORY deploy.py` after a converging run,
remote commands, operations, commands per operation and changes; plus pyinfra's floor (an empty deploy
against the same host). Figures, not a timed test: run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


@dataclass
class Sample:
    seconds: float
    commands: int
    operations: int
    changed: int
    failed: int


def run_once(inventory: str, deploy: str, data: list[str]) -> Sample:
    args = [PYINFRA, "-y", inventory, deploy, "--json", "--debug"]
    for item in data:
        args += ["--data", item]
    start = time.monotonic()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - start
    results = (json.loads(proc.stdout).get("results") or {}) if proc.stdout.strip() else {}
    operations = results.get("operations", [])
    return Sample(
        seconds=seconds,
        commands=proc.stderr.count("Running command on "),
        operations=len(operations),
        changed=sum(1 for op in operations if op.get("success")),
        failed=len(results.get("failed_hosts", [])) + (proc.returncode != 0),
    )


def measure(inventory: str, deploy: str, data: list[str], runs: int) -> dict:
    samples = [run_once(inventory, deploy, data) for _ in range(runs)]
    last = samples[-1]
    return {
        "median_s": round(statistics.median(s.seconds for s in samples), 3),
        "min_s": round(min(s.seconds for s in samples), 3),
        "max_s": round(max(s.seconds for s in samples), 3),
        "commands": last.commands,
        "operations": last.operations,
        "commands_per_operation": round(last.commands / last.operations, 2) if last.operations else None,
        "changed": max(s.changed for s in samples),
        "failed": max(s.failed for s in samples),
        "runs": [asdict(s) for s in samples],
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--inventory", default="inventory/sandbox.py")
    ap.add_argument("--deploy", default="deploy.py")
    ap.add_argument("--data", action="append", default=[], help="extra --data KEY=VALUE for every run")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)

    converge = run_once(args.inventory, args.deploy, args.data)
    if converge.failed:
        print("the converging run failed; fix the deploy first", file=sys.stderr)
        return 2
    figures = {
        "floor (empty deploy)": measure(args.inventory, "benchmarks/empty_deploy.py", args.data, args.runs),
        "vllm-rig settings": measure(args.inventory, args.deploy, args.data, args.runs),
        "stock pyinfra (no TCP_NODELAY)": measure(
            args.inventory, args.deploy, [*args.data, "ssh_tcp_nodelay=false"], args.runs
        ),
    }
    ours, stock, floor = (
        figures[k] for k in ("vllm-rig settings", "stock pyinfra (no TCP_NODELAY)", "floor (empty deploy)")
    )
    print(f"No-op re-run of {args.deploy} against {args.inventory}, median of {args.runs} runs:")
    print(f"  {'variant':32} {'wall s':>8} {'commands':>9} {'ops':>5} {'cmd/op':>7} {'changed':>8}")
    for name, f in figures.items():
        cpo = "-" if f["commands_per_operation"] is None else f["commands_per_operation"]
        print(f"  {name:32} {f['median_s']:8.2f} {f['commands']:9d} {f['operations']:5d} {cpo!s:>7} {f['changed']:8d}")
    print(
        f"  speed-up over stock: {stock['median_s'] / ours['median_s']:.2f}x (wall); "
        f"over pyinfra's floor: {ours['median_s'] / floor['median_s']:.2f}x the empty deploy"
    )
    above_floor = (stock["median_s"] - floor["median_s"]) / max(ours["median_s"] - floor["median_s"], 1e-3)
    print(f"  time above the floor, stock / ours: {above_floor:.1f}x")
    if ours["commands"]:
        # Where the rest goes: the stall NODELAY removes, and what each command still costs above the floor
        # (the remote work itself, sudo, and pyinfra's own per-operation work).
        stall_ms = 1000 * (stock["median_s"] - ours["median_s"]) / ours["commands"]
        left_ms = 1000 * (ours["median_s"] - floor["median_s"]) / ours["commands"]
        print(f"  per remote command: {stall_ms:.0f} ms of stall removed; {left_ms:.0f} ms left above the floor")
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
