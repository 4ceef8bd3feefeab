"""Several rigs for the price of one build, on the sandbox: two fresh hosts of one build fingerprint in ONE
deploy.py run, against one fresh host alone. Prints the wall times, what the second host adds, and when each
host's service was proven.

    python -m tests.sandbox up --machines 2 && python benchmarks/artifacts.py [--build-s 240]

Each measurement starts from fresh machines (trees from the image) that got the host stage first (driver,
CUDA: not timed, the same on both) and an empty artifact store; the stand-in fork's compile takes --build-s
(the forge's build_seconds knob), so the build dominates. Then:
  alone:    deploy.py --limit rig1: rig1 compiles, downloads the model, serves, is proven;
  together: deploy.py over rig1 and rig2 in one run: rig1 compiles (first in the inventory), rig2 installs
            its artifact after it is stored, and takes its model from rig1 (model_peers, the same model).
Wall times run from the deploy's start to its end (every service proven by a real completion). "Proven at"
is the service unit's ActiveEnterTimestamp on the host: systemd enters active only after the start check
(ExecStartPost) has proven the server. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.conftest import Rig  # noqa: E402
from tests.e2e.deploys import HOST_STAGE, DeployFailed, deploy, fresh, sandbox_rig  # noqa: E402
from tests.sandbox import paths  # noqa: E402
from tests.sandbox.fixtures import forge  # noqa: E402

# Runtime artifacts on, and rig2 (the sandbox's qwen38 profile) given rig1's model, so one of them can take
# the model from the other (model_peers is on by default).
ON = {
    "runtime_artifacts": True,
    "model_repo": "nerkyor/Qwen3.6-27B-DSV4Pro-Thinking-Distill-FP8",
    "model_dir": "/opt/vllm-rig/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8",
}
COMPILE = "--no-build-isolation --no-deps -e"  # the fork's compile command in a build log
SERVICE = "vllm.service"  # group_data/all.py service_name


def sh(rig: Rig, name: str, command: str) -> str:
    return rig.ssh(name, f"sudo sh -c {shlex.quote(command)}").strip()


def fresh_hosts(rig: Rig, names: tuple[str, ...]) -> None:
    shutil.rmtree(paths.STATE / "runtime-artifacts", ignore_errors=True)
    for name in names:
        fresh(rig, name)
    if not (run := deploy(rig, *HOST_STAGE, limit=",".join(names))).ok:
        raise DeployFailed(run)


def timed_deploy(rig: Rig, limit: str | None, build_s: float) -> tuple[float, float]:
    """(start epoch, wall seconds) of deploy.py."""
    t0, m0 = time.time(), time.monotonic()
    if not (run := deploy(rig, "deploy.py", limit=limit, data=ON, timeout=build_s + 1200)).ok:
        raise DeployFailed(run)
    return t0, time.monotonic() - m0


def proven_at(rig: Rig, name: str, since: float) -> float:
    """Seconds after `since` that the host's service entered active (after its start check)."""
    stamp = sh(rig, name, f"systemctl show --timestamp=us+utc -p ActiveEnterTimestamp --value {SERVICE}")
    when = datetime.datetime.strptime(stamp, "%a %Y-%m-%d %H:%M:%S.%f %Z").replace(tzinfo=datetime.UTC)
    return when.timestamp() - since


def runtime_record(rig: Rig, name: str) -> tuple[str, str]:
    """(fingerprint, build log) of the host's current runtime."""
    fp = json.loads(sh(rig, name, "cat /opt/vllm-rig/current/runtime.json"))["fingerprint"]
    return fp, sh(rig, name, f"cat /var/lib/vllm-rig/logs/build-{fp[:16]}.log")


def model_source(rig: Rig, name: str) -> str:
    """Where the host's model came from, in its completion marker's words (model_fetch.py writes from_peer)."""
    text = sh(rig, name, f"cat {ON['model_dir']}/.vllm-rig-complete.json 2>/dev/null || true")
    try:
        peer = (json.loads(text) if text else {}).get("from_peer")
    except ValueError:
        return "unknown (the marker is not JSON)"
    if not text:
        return "unknown (no marker)"
    return f"model peer {peer['name']}, {peer['files']} files" if peer else "the mirror"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-s", type=float, default=240.0, help="the stand-in fork's compile time")
    args = ap.parse_args(argv)
    rig = sandbox_rig(2)
    forge.write_knobs(build_seconds=args.build_s)
    try:
        fresh_hosts(rig, ("rig1",))
        start, alone = timed_deploy(rig, "rig1", args.build_s)
        alone_proven = proven_at(rig, "rig1", start)
        fresh_hosts(rig, ("rig1", "rig2"))
        start, together = timed_deploy(rig, None, args.build_s)
        proven = {name: proven_at(rig, name, start) for name in ("rig1", "rig2")}
    finally:
        forge.write_knobs(build_seconds=2.0)
    fp, log1 = runtime_record(rig, "rig1")
    fp2, log2 = runtime_record(rig, "rig2")
    extra = together - alone
    print(f"Two fresh rigs of one fingerprint {fp[:16]} in one deploy.py run (--build-s {args.build_s:g}):")
    print(f"  rig1 alone:            wall {alone:6.1f}s (service proven at +{alone_proven:.1f}s)")
    print(f"  rig1 and rig2 at once: wall {together:6.1f}s")
    print(f"    rig1 proven at +{proven['rig1']:.1f}s, rig2 proven at +{proven['rig2']:.1f}s")
    print(f"  what rig2 adds to the run: {extra:+.1f}s = {extra / alone:.3f} x rig1 alone")
    print(f"  rig2 proven after rig1: {proven['rig2'] - proven['rig1']:+.1f}s")
    print(f"  rig1 compiled: {COMPILE in log1}; rig2 same fingerprint: {fp2 == fp}")
    print(f"  rig2's build log says 'installed from artifact {fp[:16]}...': {f'installed from artifact {fp}' in log2}")
    print(f"  rig2's build log holds a compile: {COMPILE in log2}")
    print(f"  rig2's model from: {model_source(rig, 'rig2')}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DeployFailed as err:
        sys.exit(f"artifacts: a deploy failed: {err}")
