"""Runtime artifacts through the shared HTTP store (the sandbox's real nginx with WebDAV PUT and basic auth):
rig1 compiles and its artifact is uploaded; rig2, fresh, with the same fingerprint, installs it (no compile);
a corrupt archive on the server makes rig2 compile instead, with one line, and the deploy ends proven.

Brings up rig2 beside rig1 and takes it down again at the end.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import deploy, two_fresh_hosts
from tests.e2e.test_runtime_artifacts import COMPILE, ROOT, build_log, current, expect_ok, record, sh
from tests.sandbox import machine, services
from tests.sandbox.__main__ import up
from tests.sandbox.fixtures import artifact_store
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime import http_store

pytestmark = pytest.mark.sandbox

SERVED = artifact_store.files()  # the store's files as nginx keeps them


def settings() -> dict[str, object]:
    return {
        "runtime_artifacts": True,
        "runtime_artifact_store": artifact_store.url(),
        "runtime_artifact_store_auth": artifact_store.auth(),
        "runtime_artifact_store_allow_http": True,  # the sandbox store's plain port; https is tls_url()
    }


@pytest.fixture(scope="module")
def two_hosts(rig: Rig) -> Iterator[Rig]:
    up(2)
    services.up_one("artifact_store")
    shutil.rmtree(SERVED, ignore_errors=True)
    SERVED.mkdir(parents=True)
    shutil.rmtree(http_store.DEFAULT_CACHE, ignore_errors=True)
    try:  # rig2 goes down even when making the two hosts fails: the next module in this lane expects rig1 alone
        yield two_fresh_hosts(rig)
    finally:
        machine.down(machine.Machine("rig2"))


def test_first_host_compiles_and_uploads_the_artifact(two_hosts: Rig) -> None:
    run = expect_ok(deploy(two_hosts, "tasks/runtime.py", limit="rig1", data=settings()))
    fp = record(two_hosts, "rig1")["fingerprint"]
    assert COMPILE in build_log(two_hosts, "rig1", current(two_hosts, "rig1"))
    manifest = json.loads((SERVED / runtime_artifact.manifest_name(fp)).read_text())
    archive = SERVED / runtime_artifact.archive_name(fp)
    assert runtime_artifact.file_sha256(archive) == manifest["archive_sha256"]
    assert any(rel.startswith("venv/") for rel in manifest["files"])
    assert artifact_store.url() in run.log and artifact_store.auth().split(":", 1)[1] not in run.log
    assert f"runtime artifact store {artifact_store.url()} is plain http://" in run.log
    assert sh(two_hosts, "rig1", f"ls {ROOT}/cache/artifacts") == ""  # the host keeps no copy


def test_second_host_installs_it_from_the_http_store(two_hosts: Rig) -> None:
    fp = record(two_hosts, "rig1")["fingerprint"]
    expect_ok(deploy(two_hosts, "tasks/runtime.py", limit="rig2", data=settings()))
    log = build_log(two_hosts, "rig2", current(two_hosts, "rig2"))
    assert f"installed from artifact {fp}" in log
    assert COMPILE not in log
    assert record(two_hosts, "rig2")["installed_from_artifact"] == fp


def test_corrupt_archive_on_the_server_falls_back_to_compiling_and_ends_proven(two_hosts: Rig) -> None:
    fp = record(two_hosts, "rig1")["fingerprint"]
    archive = SERVED / runtime_artifact.archive_name(fp)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, the size unchanged
    archive.write_bytes(bytes(data))
    shutil.rmtree(http_store.DEFAULT_CACHE, ignore_errors=True)  # a control machine that has not fetched it yet
    sh(two_hosts, "rig2", f"rm -rf {ROOT}/runtimes/* {ROOT}/current {ROOT}/previous")
    run = expect_ok(deploy(two_hosts, "deploy.py", limit="rig2", data=settings(), timeout=1500))
    log = build_log(two_hosts, "rig2", current(two_hosts, "rig2"))
    said = [line for line in log.splitlines() if line.startswith(f"artifact {fp[:16]} not used")]
    assert len(said) == 1 and "corrupt" in said[0] and said[0].endswith("building instead"), said
    assert COMPILE in log
    assert record(two_hosts, "rig2")["installed_from_artifact"] is None
    assert "service_probe: generated" in run.log  # the deploy proved generation, not just /health
    # rig2 compiled although the store held its fingerprint: its artifact replaced the corrupt one
    manifest = json.loads((SERVED / runtime_artifact.manifest_name(fp)).read_text())
    assert runtime_artifact.file_sha256(archive) == manifest["archive_sha256"]


def test_a_store_that_refuses_the_password_is_one_warning_and_the_host_compiles(two_hosts: Rig) -> None:
    fp = record(two_hosts, "rig1")["fingerprint"]
    sh(two_hosts, "rig2", f"rm -rf {ROOT}/runtimes/* {ROOT}/current {ROOT}/previous")
    wrong = {**settings(), "runtime_artifact_store_auth": "rig:not-the-password"}
    run = expect_ok(deploy(two_hosts, "tasks/runtime.py", limit="rig2", data=wrong))
    refused = f"store {artifact_store.url()}: GET {runtime_artifact.manifest_name(fp)}: HTTP 401 Unauthorized"
    said = [line for line in run.log.splitlines() if refused in line]  # at planning and before the build
    assert said and all(line.rstrip().endswith("this host compiles") for line in said), said
    lines = run.log.splitlines()
    assert any(f"store {artifact_store.url()}: PUT " in line and "other hosts compile" in line for line in lines)
    assert "Traceback" not in run.log and "not-the-password" not in run.log
    assert COMPILE in build_log(two_hosts, "rig2", current(two_hosts, "rig2"))
