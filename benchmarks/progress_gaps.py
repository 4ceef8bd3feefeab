"""The longest silence of a whole deploy on the sandbox, with a long compile and a long download: does the
owner see a line at least every 30 s?

    python -m tests.sandbox up && python benchmarks/progress_gaps.py [--build-s 300] [--download-s 300]

rig1 made new (tree from the image, booted; not timed), then `pyinfra -y inventory/sandbox.py deploy.py`,
with the stand-in fork's compile taking --build-s (the forge's build_seconds knob) and the mirror throttled
so the model download takes about --download-s. Every line pyinfra prints is stamped as it arrives; the
script prints the run's wall time, how many lines came, the longest gaps between two lines with the lines on
either side, and whether the 30 s target held. The fork kind's compile is what makes a stage long here (the
upstream kind compiles nothing), so the run uses it. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e import figures, model  # noqa: E402
from tests.e2e.deploys import fresh, sandbox_rig  # noqa: E402
from tests.sandbox import paths  # noqa: E402
from tests.sandbox.fixtures import forge  # noqa: E402

TARGET_S = 30.0


def stamped_run(args: list[str]) -> tuple[int, list[tuple[float, str]]]:
    """pyinfra with its output read line by line, each line with the seconds since the start."""
    exe = Path(sys.executable).with_name("pyinfra")
    cmd = [str(exe), "-y", "inventory/sandbox.py", *args]
    started = time.monotonic()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(cmd, cwd=paths.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip()))
    return proc.returncode, lines


def gaps(lines: list[tuple[float, str]]) -> list[tuple[float, str, str]]:
    """(seconds between two lines, the line before, the line after), longest first."""
    out = [(b[0] - a[0], a[1], b[1]) for a, b in zip(lines, lines[1:], strict=False)]
    return sorted(out, reverse=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-s", type=float, default=300.0, help="the stand-in fork's compile time")
    ap.add_argument("--download-s", type=float, default=300.0, help="the model download's target time")
    ap.add_argument("--show", type=int, default=5, help="how many of the longest gaps to print")
    args = ap.parse_args(argv)
    rig = sandbox_rig()
    fresh(rig)
    model.knobs(throttle_bytes_per_s=int(model.total() / args.download_s))
    forge.write_knobs(build_seconds=args.build_s)
    try:
        rc, lines = stamped_run(["deploy.py", "--data", "runtime_kind=fork"])
    finally:
        model.knobs()
        forge.write_knobs(build_seconds=figures.BUILD_SECONDS)
    wall = lines[-1][0] if lines else 0.0
    longest = gaps(lines)
    print(
        f"deploy.py on a fresh rig1 (compile {args.build_s:g} s, download ~{args.download_s:g} s): exit {rc}, "
        f"{wall:.0f} s, {len(lines)} lines"
    )
    for seconds, before, after in longest[: args.show]:
        print(f"  {seconds:5.1f} s quiet between\n      {before[:150]}\n      {after[:150]}")
    worst = longest[0][0] if longest else 0.0
    verdict = "held" if worst <= TARGET_S else "NOT held"
    print(f"longest silence {worst:.1f} s: the {TARGET_S:g} s target {verdict}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
