"""Download and runtime build overlap on the sandbox: wall / (download + build), on a fresh box and on a
forced rebuild.

    python -m tests.sandbox up && python benchmarks/overlap.py [--download-s 60] [--build-s 30] [--fresh-only]

fresh: rig1 made new (its tree from the image, booted; not timed), then deploy.py's stages from preflight
through model finish in one run (tests/e2e/figures.py: through_model_finish): the download starts right after
preflight, the driver stage reboots the box (that stops the download; model resume starts it again), CUDA, the
first runtime build (apt, git and pip from nothing), the wait for the model. rebuild: the same box, model start,
runtime (forced rebuild) and model finish, the model downloaded again, caches warm.

wall: that deploy's time on the control side, from pyinfra's start to its end; the stages after model finish
(verify, service, lan, models keep) are not in it. download: the download unit's running time, every run of it
(from the host's journal). build: the runtime build unit's run (venv, pip, the compile; not the apt and git
work before it, nor driver and CUDA, which count in wall only). So the ratio is 1.0 or more when the two run
one after the other, 0.5 when two equal halves overlap completely and nothing else takes time.

The mirror is throttled so the download takes about --download-s; the stand-in fork's compile takes --build-s
(the build's pip work adds its own ~20-45 s). Prints each run's timeline in seconds after the deploy began.
Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e import figures  # noqa: E402
from tests.e2e.deploys import DeployFailed, sandbox_rig  # noqa: E402


def show(label: str, o: figures.Overlap) -> None:
    runs = ", ".join(f"+{a:.1f}..+{b:.1f}" for a, b in o.download_runs)
    b0, b1 = o.build_at
    print(
        f"  {label:8} download {o.download:5.1f}s ({runs}), build {o.build:5.1f}s (+{b0:.1f}..+{b1:.1f}),"
        f" both {o.together:5.1f}s, wall {o.wall:5.1f}s: wall / (download + build) = {o.ratio:.2f}"
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--download-s", type=float, default=60.0, help="the download's target time (mirror throttle)")
    ap.add_argument("--build-s", type=float, default=30.0, help="the stand-in fork's compile time")
    ap.add_argument("--fresh-only", action="store_true", help="measure the fresh box only, not the rebuild")
    args = ap.parse_args(argv)
    rig = sandbox_rig()
    print(
        f"Overlap of the model download and the runtime build on rig1 (--download-s {args.download_s:g}, "
        f"--build-s {args.build_s:g}); times after the deploy began:"
    )
    show("fresh", figures.overlap_fresh(rig, args.download_s, args.build_s))
    if not args.fresh_only:
        show("rebuild", figures.overlap(rig, args.download_s, args.build_s))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"overlap: a deploy failed: {err}")
