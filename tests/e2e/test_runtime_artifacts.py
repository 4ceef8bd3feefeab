"""Runtime artifacts on the sandbox: two fresh hosts of one fingerprint in one run: rig1 compiles and its
runtime goes into the store by fingerprint; rig2 installs it (no compile) and passes the same checks; a later
run of rig2 alone installs it from the store; an artifact changed in the store after it was stored (archive
and manifest both) makes rig2 compile instead, with one line, and the whole deploy still ends with a proven
service.

Brings up rig2 beside rig1 and takes it down again at the end.
"""

from __future__ import annotations

import json
import shlex
import shutil
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import DeployRun, deploy, two_fresh_hosts
from tests.sandbox import machine, paths
from tests.sandbox.__main__ import up
from tests.sandbox.fixtures import forge
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime import artifact_signing as signing

pytestmark = pytest.mark.sandbox

ROOT = "/opt/vllm-rig"
STORE = paths.STATE / "runtime-artifacts"  # inventory/sandbox.py's runtime_artifact_store
KEY = paths.STATE / "runtime-artifact.key"  # and its runtime_artifact_key
ON = {"runtime_artifacts": True}
COMPILE = "--no-build-isolation --no-deps -e"  # the fork's compile command in the build log


def sh(rig: Rig, name: str, command: str) -> str:
    return rig.ssh(name, f"sudo sh -c {shlex.quote(command)}").strip()


def current(rig: Rig, name: str) -> str:
    return sh(rig, name, f"readlink {ROOT}/current || true").rsplit("/", 1)[-1]


def build_log(rig: Rig, name: str, runtime: str) -> str:
    return sh(rig, name, f"cat /var/lib/vllm-rig/logs/build-{runtime}.log")


def record(rig: Rig, name: str) -> dict:
    return json.loads(sh(rig, name, f"cat {ROOT}/current/runtime.json"))


def expect_ok(run: DeployRun) -> DeployRun:
    assert run.ok, run.log[-4000:]
    return run


@pytest.fixture(scope="module")
def two_hosts(rig: Rig) -> Iterator[Rig]:
    up(2)
    shutil.rmtree(STORE, ignore_errors=True)
    try:  # rig2 goes down even when making the two hosts fails: the next module in this lane expects rig1 alone
        yield two_fresh_hosts(rig)
    finally:
        machine.down(machine.Machine("rig2"))


def test_one_run_two_fresh_hosts_compile_once(two_hosts: Rig) -> None:
    """Both hosts in one run: rig1 (first in the inventory) compiles and stores; rig2 waits, then installs."""
    run = expect_ok(deploy(two_hosts, "tasks/runtime.py", data=ON))
    fp = record(two_hosts, "rig1")["fingerprint"]
    assert COMPILE in build_log(two_hosts, "rig1", current(two_hosts, "rig1"))
    manifest = json.loads((STORE / runtime_artifact.manifest_name(fp)).read_text())
    archive = STORE / runtime_artifact.archive_name(fp)
    assert runtime_artifact.file_sha256(archive) == manifest["archive_sha256"]
    assert signing.verify((STORE / runtime_artifact.manifest_name(fp)).read_bytes(), signing.load_key(KEY))
    assert any(rel.startswith("venv/") for rel in manifest["files"])
    assert any(rel.startswith("src/vllm/") and "/.git/" not in rel for rel in manifest["files"])
    assert sh(two_hosts, "rig1", f"ls {ROOT}/cache/artifacts") == ""  # the host keeps no copy
    assert_installed_from(two_hosts, "rig2", fp)
    assert "rig1 compiles this fingerprint in this run" in run.log
    assert f"Runtime {current(two_hosts, 'rig2')} installed from that artifact, checked" in " ".join(run.changed)


def test_a_later_run_installs_from_the_store(two_hosts: Rig) -> None:
    fp = record(two_hosts, "rig1")["fingerprint"]
    sh(two_hosts, "rig2", f"rm -rf {ROOT}/runtimes/* {ROOT}/current {ROOT}/previous")
    run = expect_ok(deploy(two_hosts, "tasks/runtime.py", limit="rig2", data=ON))
    assert_installed_from(two_hosts, "rig2", fp)
    assert "Runtime artifact of this fingerprint from the store" in " ".join(run.changed)


def assert_installed_from(rig: Rig, name: str, fp: str) -> None:
    assert record(rig, name)["fingerprint"] == fp
    log = build_log(rig, name, current(rig, name))
    assert f"installed from artifact {fp}" in log
    assert COMPILE not in log
    assert "==> step 7/8: validate" in log and "==> step 8/8: check" in log  # the checks a fresh build runs
    assert record(rig, name)["installed_from_artifact"] == fp
    assert sh(rig, name, f"cd / && {ROOT}/current/venv/bin/python -c 'import vllm._C' && echo OK") == "OK"


def test_an_artifact_changed_in_the_store_is_refused_and_the_host_compiles_and_ends_proven(two_hosts: Rig) -> None:
    """Whoever can write to the store flips a byte of the archive and sets the manifest's sum to match: the
    control machine's signature no longer holds, so rig2 is offered nothing, says so in one line and compiles;
    the whole deploy still ends with a proven service, and rig2's artifact, signed, replaces the altered one."""
    fp = record(two_hosts, "rig1")["fingerprint"]
    archive = STORE / runtime_artifact.archive_name(fp)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, the size unchanged
    archive.write_bytes(bytes(data))
    path = STORE / runtime_artifact.manifest_name(fp)
    path.write_text(
        json.dumps({**json.loads(path.read_text()), "archive_sha256": runtime_artifact.file_sha256(archive)})
    )
    sh(two_hosts, "rig2", f"rm -rf {ROOT}/runtimes/* {ROOT}/current {ROOT}/previous")
    run = expect_ok(deploy(two_hosts, "deploy.py", limit="rig2", data=ON, timeout=1500))
    said = [line for line in run.log.splitlines() if f"runtime artifact {fp[:16]} in " in line]
    assert len(said) == 1 and "changed after it was stored" in said[0], said
    assert said[0].rstrip().endswith("this host compiles"), said
    log = build_log(two_hosts, "rig2", current(two_hosts, "rig2")).rsplit("BUILD START", 1)[-1]  # this run's
    assert COMPILE in log and "installed from artifact" not in log and "not used" not in log  # never offered
    assert record(two_hosts, "rig2")["installed_from_artifact"] is None
    assert "service_probe: generated" in run.log  # the deploy proved generation, not just /health
    assert signing.verify(path.read_bytes(), signing.load_key(KEY))["archive_sha256"] == runtime_artifact.file_sha256(
        archive
    )


def test_when_the_compiling_host_fails_the_others_compile(two_hosts: Rig) -> None:
    """rig1's build is stopped mid-compile: rig1 fails with its one line, rig2 says rig1 left no artifact and
    compiles itself, in the same run."""
    for name in ("rig1", "rig2"):
        sh(two_hosts, name, f"rm -rf {ROOT}/runtimes/* {ROOT}/current {ROOT}/previous /var/lib/vllm-rig/logs/build-*")
    shutil.rmtree(STORE, ignore_errors=True)
    forge.write_knobs(build_seconds=40.0)

    def stop_rig1_then_compile_quickly() -> None:
        stop_build_when_compiling(two_hosts, "rig1")
        forge.write_knobs(build_seconds=2.0)  # rig2 compiles only after rig1 failed: its compile need not be long

    stopper = threading.Thread(target=stop_rig1_then_compile_quickly, daemon=True)
    stopper.start()
    try:
        run = deploy(two_hosts, "tasks/runtime.py", data=ON, timeout=900)
    finally:
        forge.write_knobs(build_seconds=2.0)
        stopper.join(timeout=5)
    assert run.failed_hosts == ["rig1"], run.log[-3000:]
    said = [line for line in run.log.splitlines() if "left no artifact" in line]
    assert len(said) == 1 and said[0].strip().startswith("[rig2] rig1 left no artifact"), said
    log = build_log(two_hosts, "rig2", current(two_hosts, "rig2"))
    assert COMPILE in log and record(two_hosts, "rig2")["installed_from_artifact"] is None


def stop_build_when_compiling(rig: Rig, name: str, within_s: float = 600) -> None:
    """Stop the host's runtime build unit once its log shows the compile step."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        units = sh(rig, name, "systemctl list-units --plain --no-legend 'vllm-rig-build-*' | awk '{print $1}'")
        logs = sh(rig, name, "cat /var/lib/vllm-rig/logs/build-*.log 2>/dev/null || true")
        if units and COMPILE in logs:
            sh(rig, name, f"systemctl stop {units.split()[0]}")
            return
        time.sleep(1)
