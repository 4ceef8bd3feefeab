"""Bytes fetched again after a cut: the mirror drops the connection once, mid-shard, during a model download.

    python -m tests.sandbox up && python benchmarks/refetch.py [--cut-mb 15]

Resets rig1's model (deletes it and stops a running download; the rest of the machine stays), then runs the
model stage (tasks/model_start.py, tasks/model_finish.py) with the HF mirror stand-in closing the connection
--cut-mb MB (10^6 bytes) into the biggest shard. Prints the shard's size, the requests for it, the bytes
fetched again and the bytes the whole download took beyond the model's size. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e import figures, model  # noqa: E402
from tests.e2e.deploys import DeployFailed, sandbox_rig  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cut-mb", type=float, default=15.0, help="where the connection drops, in MB of the shard")
    args = ap.parse_args(argv)
    cut = figures.refetch_after_cut(sandbox_rig(), int(args.cut_mb * 1_000_000))
    mib = model.MIB
    print(f"Connection cut {args.cut_mb:g} MB into {model.BIG_SHARD} ({cut.shard_size / mib:.2f} MiB):")
    for get in cut.shard_gets:
        print(f"  GET {get['bytes'] / mib:6.2f} MiB {', '.join(get['events']) or 'no fault'}")
    print(f"  re-fetched: {cut.refetched / mib:.2f} MiB ({cut.refetched} bytes)")
    print(f"  whole download: {cut.served / mib:.2f} MiB for a {model.total() / mib:.2f} MiB model")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"refetch: a deploy failed: {err}")
