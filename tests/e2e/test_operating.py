"""Operating the rigs on the sandbox: the status view of two hosts in one call while one is mid-build and the other
serves (table and JSON, timed), and the triage bundle of a serving host opened: every part there, no secret.

Brings up rig2 beside rig1 and takes it down again at the end, as tests/e2e/test_whole_rig.py does.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import deploy, serving_rig, staged
from tests.sandbox import machine, paths
from tests.sandbox.__main__ import up
from tests.sandbox.fixtures import forge
from tests.unit.test_triage import GIVEN_PARTS, HOST_PARTS  # the bundle's parts, listed once

pytestmark = pytest.mark.sandbox
BUILD_SECONDS = 40  # the stand-in fork's build, long enough to read the status in the middle of it


@pytest.fixture(scope="module")
def two_hosts(rig: Rig) -> Iterator[Rig]:
    up(2)
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    try:  # rig2 goes down even when rig1 cannot be made to serve: the next module in this lane expects rig1 alone
        serving_rig(both, "rig1")  # the defaults after a whole deploy (an earlier module's, kept, when there is one)
        yield both
    finally:
        machine.down(machine.Machine("rig2"))


def _serving(rig: Rig, name: str) -> str:
    """The host's API key, after deploying it with the default settings (the first call deploys the fresh rig1;
    the second changes nothing)."""
    run = deploy(rig, "deploy.py", limit=name)
    assert run.ok, run.log[-4000:]
    service.models(service.api_key(rig, name), name, timeout=30)
    return service.api_key(rig, name)


def _chat(key: str, name: str, model: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 48})
    req = urllib.request.Request(
        f"http://127.0.0.1:{service.port(name)}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def _status(rig: Rig, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    run = rig.pyinfra("tasks/status.py", *extra, timeout=120)
    return run, time.monotonic() - started


def _leaves(status: dict[str, Any]) -> list[tuple[str, Any]]:
    out = [(f"{sec}.{k}", v) for sec, fields in status["sections"].items() for k, v in fields.items()]
    return out + [("gpus", status["gpus"])]


def _filled_or_explained(status: dict[str, Any]) -> None:
    for name, value in _leaves(status):
        if isinstance(value, dict):
            assert set(value) == {"unknown"} and value["unknown"].strip(), (status["host"], name, value)
        else:
            assert str(value).strip(), (status["host"], name)


def test_status_of_two_hosts_one_mid_build_one_serving(two_hosts: Rig) -> None:
    key = _serving(two_hosts, "rig1")
    staged(two_hosts, "rig2")  # a new machine after the host stage: what its whole deploy does next is read
    forge.write_knobs(build_seconds=BUILD_SECONDS)
    args = [
        str(Path(sys.executable).with_name("pyinfra")),
        "-y",
        "inventory/sandbox.py",
        "deploy.py",
        "--limit",
        "rig2",
    ]
    env = {**os.environ, "VLLM_RIG_SANDBOX_MACHINES": "2"}
    proc = subprocess.Popen(args, cwd=paths.REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 400
        while "running" not in two_hosts.ssh("rig2", "cat /opt/vllm-rig/runtimes/*/.build/status.json", check=False):
            assert time.monotonic() < deadline and proc.poll() is None, "rig2's build never started"
            time.sleep(2)
        table, table_s = _status(two_hosts)
        _chat(key, "rig1", "qwen-local")  # tokens between this read and the next
        as_json, json_s = _status(two_hosts, "--data", "status_format=json")
        building = two_hosts.ssh("rig2", "systemctl list-units --no-legend 'vllm-rig-build-*'")
        restarts = two_hosts.ssh("rig1", "systemctl show -p NRestarts --value vllm.service").strip()
    finally:
        forge.write_knobs(build_seconds=2)
    print(f"\nstatus of two hosts, one mid-build: table {table_s:.2f}s, json {json_s:.2f}s\n{table.stderr[-6000:]}")
    assert table.returncode == 0 and as_json.returncode == 0, table.stderr[-3000:] + as_json.stderr[-3000:]
    # The guarantee: both reads came back while the build still ran (its unit is read after them), so status
    # never waits on a build. How fast they came is a figure (printed above), not a guarantee: the table took
    # 12.3 s and the JSON 6.7 s with four lanes on a 2-core machine, where a 10 s bound failed.
    assert "vllm-rig-build" in building, "the status was not read mid-build"
    assert "status of rig1 at " in table.stderr and "status of rig2 at " in table.stderr
    by_host = {s["host"]: s for s in map(json.loads, as_json.stdout.splitlines())}
    assert set(by_host) == {"rig1", "rig2"}
    for status in by_host.values():
        _filled_or_explained(status)

    serving = by_host["rig1"]["sections"]
    assert serving["service"]["state"] == "active (running)"
    # systemd's own count (earlier tests on this machine may have killed the server): the view reads it right
    assert serving["service"]["restarts since boot"] == int(restarts)
    assert serving["api"]["answers"] == "yes, with the key: qwen-local"
    assert serving["gpu verdict"]["last"].startswith("pass at ")
    assert serving["model"]["verified"].startswith("yes: every file's sha256")
    assert serving["runtime"]["current"].endswith(", vllm 0.1.17)") and serving["runtime"]["building"] == "no"
    assert serving["driver"]["loaded"] == serving["driver"]["installed"] == "580.159.03"
    assert serving["driver"]["reboot pending"] == "no"
    assert serving["service"]["last start check"].startswith("ok at ")  # the unit's own start check (day two)
    assert serving["metrics"]["KV cache usage"].endswith("%")
    assert "% since the server started" in serving["metrics"]["MTP acceptance"]
    assert " generated, " in serving["metrics"]["tokens/s"]  # the chat between the two reads
    gpus = by_host["rig1"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1] and all(g["temperature_c"] and g["power_limit_w"] for g in gpus)

    mid_build = by_host["rig2"]["sections"]
    assert mid_build["runtime"]["current"] == "none"
    assert "(running, step " in mid_build["runtime"]["building"]
    assert mid_build["service"]["state"].startswith("not installed")
    assert mid_build["api"]["answers"].startswith("no: ")
    assert all(v["unknown"].startswith("/metrics does not answer") for v in mid_build["metrics"].values())
    assert mid_build["gpu verdict"]["last"] == "none yet (the verify stage has not run)"
    assert mid_build["cuda"]["nvcc"].startswith("Cuda compilation tools, release 12.9")
    assert proc.wait(timeout=600) == 0  # and the deploy it was read in the middle of went on to the end


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_triage_bundle_of_a_serving_host_has_every_part_and_no_secret(two_hosts: Rig) -> None:
    key = _serving(two_hosts, "rig1")
    token = "hf_" + secrets.token_hex(16)
    log = "$(ls -t /var/lib/vllm-rig/logs/build-*.log | head -n 1)"
    # As a leaking tool would: both secrets in the newest build log, the token in the host's token file.
    plant = (
        f"f={log}; cp $f /tmp/build-log.orig; echo 'Authorization: Bearer {key} HF_TOKEN={token}' >> $f; "
        f"test -e /etc/vllm-rig/hf-token.env && cp /etc/vllm-rig/hf-token.env /tmp/hf-token.orig; "
        f"umask 077; echo 'HF_TOKEN={token}' > /etc/vllm-rig/hf-token.env"
    )
    restore = (
        f"cp /tmp/build-log.orig {log}; if [ -e /tmp/hf-token.orig ]; then mv /tmp/hf-token.orig "
        "/etc/vllm-rig/hf-token.env; else rm -f /etc/vllm-rig/hf-token.env; fi"
    )
    two_hosts.ssh("rig1", f"sudo sh -c {shlex.quote(plant)}")
    before = set((paths.REPO / "triage").glob("rig1-triage-*.tar.gz"))
    try:
        started = time.monotonic()
        run = deploy(two_hosts, "tasks/triage.py", limit="rig1", data={"hf_token": token})
        took = time.monotonic() - started
    finally:
        two_hosts.ssh("rig1", f"sudo sh -c {shlex.quote(restore)}")
    assert run.ok, run.log[-4000:]
    [archive] = set((paths.REPO / "triage").glob("rig1-triage-*.tar.gz")) - before
    print(f"\ntriage bundle of rig1: {took:.1f}s, {archive.stat().st_size} bytes")
    members = _members(archive)
    assert set(members) == {*HOST_PARTS, *GIVEN_PARTS, "MANIFEST.json"}
    everything = b"".join(members.values())
    assert key.encode() not in everything and token.encode() not in everything
    assert key not in run.log and token not in run.log
    assert b"Bearer <redacted:VLLM_API_KEY> HF_TOKEN=<redacted:HF_TOKEN>" in members["journal/build-log.txt"]

    manifest = json.loads(members["MANIFEST.json"])
    assert manifest["redacted_total"] >= 2
    assert all(p.get("present", True) for p in manifest["parts"].values()), manifest["parts"]
    assert json.loads(members["settings.json"])["hf_token"] == "<redacted>"
    assert json.loads(members["preflight.json"])["go"] is True
    assert json.loads(members["gpu-verdict.json"])["verdict"] == "pass"
    # The links come from NVML on the box (the libnvidia-ml the driver package installs), in preflight and the
    # verdict alike: NV2 between the pair, both links of each GPU up, nothing NVML could not answer.
    preflight = {c["name"]: c for c in json.loads(members["preflight.json"])["checks"]}
    nvlink = preflight["nvlink"]
    assert nvlink["status"] == "ok" and nvlink["detail"].startswith("GPU0-GPU1 NV2; 2 link(s)")
    verdict = json.loads(members["gpu-verdict.json"])
    assert verdict["topology"]["GPU0"]["GPU1"] == "NV2" and verdict["nvlink_down"] == [] and verdict["notes"] == []
    assert json.loads(members["status.json"])["sections"]["service"]["state"] == "active (running)"
    assert json.loads(members["versions/runtime.json"])["fingerprint"]
    assert json.loads(members["model/marker.json"])["repo"]
    assert b"NVRM version" in members["versions/driver.txt"] and b"580.159.03" in members["versions/driver.txt"]
    assert b"release 12.9" in members["versions/cuda.txt"]
    freeze = members["versions/pip-freeze.txt"].decode()
    assert "torch==2.11.0" in freeze and "transformers==5.12.1" in freeze and "vllm" in freeze
    fork = forge.manifest()["weicj/vLLM-2080Ti-Definitive"]
    assert any(sha.encode() in members["versions/commits.txt"] for sha in fork.values())
    assert (
        b"ExecStart=" in members["unit/service.txt"]
        and b"--served-model-name qwen-local" in members["unit/service.txt"]
    )
    assert b"vllm.service" in members["journal/service.txt"]
    assert b"kernel" in members["kernel/nvidia.txt"] or b"NVRM" in members["kernel/nvidia.txt"]
