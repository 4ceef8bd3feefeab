"""Runtime artifacts on the sandbox: two fresh hosts of one build fingerprint, the first compiles, the second
installs the first one's artifact. Prints each host's deploy.py wall time and the ratio.

    python -m tests.sandbox up --machines 2 && python benchmarks/artifacts.py [--build-s 240]

Both machines are made fresh and get the host stage first (driver, CUDA: not timed, the same on both). Then,
with runtime_artifacts on and an empty store, deploy.py runs on rig1 (the stand-in fork's compile takes
--build-s: the forge's build_seconds knob) and then on rig2, one after the other in this one run (the
artifact exists only once rig1's build has passed its checks). Each wall time runs to the service proven by a
real completion. Also prints whether rig2's build log says "installed from artifact <fingerprint>" and holds
no compile. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.e2e.deploys import HOST_STAGE, DeployFailed, deploy, fresh, sandbox_rig  # noqa: E402
from tests.sandbox import paths  # noqa: E402
from tests.sandbox.fixtures import forge  # noqa: E402

ON = {"runtime_artifacts": True}
COMPILE = "--no-build-isolation --no-deps -e"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-s", type=float, default=240.0, help="the stand-in fork's compile time")
    args = ap.parse_args(argv)
    rig = sandbox_rig(2)
    shutil.rmtree(paths.STATE / "runtime-artifacts", ignore_errors=True)
    forge.write_knobs(build_seconds=args.build_s)
    try:
        for name in ("rig1", "rig2"):
            fresh(rig, name)
        if not (run := deploy(rig, *HOST_STAGE)).ok:
            raise DeployFailed(run)
        walls = {}
        for name in ("rig1", "rig2"):
            t0 = time.monotonic()
            if not (run := deploy(rig, "deploy.py", limit=name, data=ON, timeout=args.build_s + 900)).ok:
                raise DeployFailed(run)
            walls[name] = time.monotonic() - t0
    finally:
        forge.write_knobs(build_seconds=2.0)

    def sh(name: str, command: str) -> str:
        return rig.ssh(name, f"sudo sh -c {shlex.quote(command)}").strip()

    fp = json.loads(sh("rig2", "cat /opt/vllm-rig/current/runtime.json"))["fingerprint"]
    log = sh("rig2", f"cat /var/lib/vllm-rig/logs/build-{fp[:16]}.log")
    print(f"Runtime artifacts, two fresh hosts of fingerprint {fp[:16]} (--build-s {args.build_s:g}), deploy.py:")
    print(f"  rig1 (compiles, stores the artifact)  wall {walls['rig1']:6.1f}s")
    print(f"  rig2 (installs the artifact)          wall {walls['rig2']:6.1f}s")
    print(f"  rig2 / rig1 = {walls['rig2'] / walls['rig1']:.3f}")
    print(f"  rig2's build log says 'installed from artifact {fp[:16]}...': {f'installed from artifact {fp}' in log}")
    print(f"  rig2's build log holds a compile: {COMPILE in log}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"artifacts: a deploy failed: {err}")
