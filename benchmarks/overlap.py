"""Download and runtime build overlap on the sandbox: wall / (download + build) for deploy.py's model start,
runtime and model finish stages.

    python -m tests.sandbox up && python benchmarks/overlap.py [--download-s 36] [--build-s 10]

Resets rig1: a fresh machine, the host stage (not timed), then two measured runs: the fresh deploy (the first
download, the first build: apt, git and pip from nothing) and a forced rebuild with the model downloaded again
(caches warm, what tests/e2e/test_model_stage.py asserts on). The mirror is throttled so the download takes
about --download-s; the stand-in fork's compile takes --build-s. Prints for each run when the download and the
build ran (seconds after the deploy began, from the host's journal), how long both ran at once, the deploy's
wall time and the ratio (1.0 or more: one after the other). Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e import figures  # noqa: E402
from tests.e2e.deploys import HOST_STAGE, DeployFailed, deploy, fresh, sandbox_rig  # noqa: E402


def show(label: str, o: figures.Overlap) -> None:
    (d0, d1), (b0, b1) = o.download_at, o.build_at
    print(
        f"  {label:8} download {o.download:5.1f}s (+{d0:.1f}..+{d1:.1f}), build {o.build:5.1f}s (+{b0:.1f}..+{b1:.1f}),"
        f" both {o.together:5.1f}s, wall {o.wall:5.1f}s: wall / (download + build) = {o.ratio:.2f}"
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--download-s", type=float, default=55.0, help="the download's target time (mirror throttle)")
    ap.add_argument("--build-s", type=float, default=10.0, help="the stand-in fork's compile time")
    args = ap.parse_args(argv)
    rig = sandbox_rig()
    fresh(rig)
    if not (host := deploy(rig, *HOST_STAGE)).ok:
        raise DeployFailed(host)
    print(
        f"Overlap of the model download and the runtime build on rig1 (--download-s {args.download_s:g}, "
        f"--build-s {args.build_s:g}); times after the deploy began:"
    )
    show("fresh", figures.overlap(rig, args.download_s, args.build_s))
    show("rebuild", figures.overlap(rig, args.download_s, args.build_s))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"overlap: a deploy failed: {err}")
