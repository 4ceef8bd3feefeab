"""Driver version changed to service answering again: the driver upgrade path on a serving box.

    python -m tests.sandbox up && python benchmarks/driver_change.py [--to 580.159.04]

Resets rig1: a fresh machine deployed with the whole deploy.py (not timed, it ends serving), then deploy.py
again with nvidia_driver_version=--to (the upgrade, one reboot, caches cleared, GPU verdict, service proven)
while /v1/models is asked every half second. Prints the deploy's wall time, the time from the settings change
to the first answer after the last unanswered request, how long the service did not answer and how many
requests went unanswered. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e import figures  # noqa: E402
from tests.e2e.deploys import DeployFailed, deploy, fresh, sandbox_rig  # noqa: E402
from tests.sandbox import machine  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", default="580.159.04", help="the new driver version (one the NVIDIA stand-in serves)")
    args = ap.parse_args(argv)
    rig = sandbox_rig()
    fresh(rig)
    if not (first := deploy(rig, "deploy.py")).ok:
        raise DeployFailed(first)
    boots = machine.boots(rig.machine())
    change = figures.driver_change(rig, args.to)
    print(f"Driver changed to {args.to} on a serving rig1 ({machine.boots(rig.machine()) - boots} reboot):")
    print(f"  deploy.py wall: {change.wall:.1f}s")
    print(f"  settings changed -> service answering again: {change.answering:.1f}s")
    print(f"  service not answering: {change.outage:.1f}s ({len(change.unanswered)} requests unanswered)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"driver_change: a deploy failed: {err}")
