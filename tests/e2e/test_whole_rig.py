"""Whole-rig scenarios on the sandbox: two hosts with the two profiles in one pyinfra run, a reboot in the
middle of a deploy, and the driver upgrade path timed from the settings change to the service answering.

Runs last (file order): it brings up rig2 beside rig1 and takes it down again at the end, so the other
scenario files keep deploying to rig1 alone.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e import figures, service
from tests.e2e.deploys import deploy, fresh, wait_new_boot
from tests.sandbox import machine, paths
from tests.sandbox.__main__ import up
from tests.sandbox.fixtures import forge

pytestmark = pytest.mark.sandbox
NEW_DRIVER = "580.159.04"


@pytest.fixture(scope="module")
def two_hosts(rig: Rig) -> Iterator[Rig]:
    up(2)
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    try:
        yield both
    finally:
        machine.down(machine.Machine("rig2"))


def _models(rig: Rig, name: str) -> list[str]:
    return service.models(service.api_key(rig, name), name)


def _exec_start(rig: Rig, name: str) -> str:
    return rig.ssh(name, "systemctl show vllm -p ExecStart")


def test_two_hosts_two_profiles_in_one_run(two_hosts: Rig) -> None:
    fresh(two_hosts, "rig1")
    fresh(two_hosts, "rig2")
    started = time.monotonic()
    run = deploy(two_hosts, "deploy.py")
    wall = time.monotonic() - started
    assert run.ok, run.log[-4000:]
    print(f"\ntwo fresh hosts, both profiles, one run: {wall:.0f}s")
    assert _models(two_hosts, "rig1") == ["qwen-local"]
    assert _models(two_hosts, "rig2") == ["qwen38-27b"]
    first, second = _exec_start(two_hosts, "rig1"), _exec_start(two_hosts, "rig2")
    assert "--max-model-len 100000" in first and "--tool-call-parser qwen3_xml" in first
    assert "--max-model-len 131072" in second and "--tool-call-parser qwen3_xml" in second
    assert "--kv-cache-dtype" not in second  # FP16 KV cache
    limits = two_hosts.ssh("rig2", "nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits").split()
    assert limits == ["175.00", "175.00"]
    again = deploy(two_hosts, "deploy.py")
    assert again.ok and again.changed == []


def test_a_reboot_in_the_middle_of_a_deploy_converges_on_the_next_run(two_hosts: Rig) -> None:
    m = machine.Machine("rig1")
    new_ref = forge.manifest()["weicj/vLLM-2080Ti-Definitive"]["main"]
    forge.write_knobs(build_seconds=40)
    args = [str(Path(sys.executable).with_name("pyinfra")), "-y", "inventory/sandbox.py", "deploy.py"]
    args += ["--limit", "rig1", "--data", f"fork_ref={new_ref}"]
    try:
        deploy_proc = subprocess.Popen(args, cwd=paths.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while "vllm-rig-build" not in two_hosts.ssh("rig1", "systemctl list-units --no-legend 'vllm-rig-build*'"):
            assert time.monotonic() < deadline and deploy_proc.poll() is None, "the build never started"
            time.sleep(1)
        before = machine.boot_id(m)
        machine.ssh(m, "sudo systemctl reboot", check=False)
        wait_new_boot(m, before)
        assert deploy_proc.wait(timeout=300) != 0  # the run that lost its host fails
    finally:
        forge.write_knobs(build_seconds=2)
    run = deploy(two_hosts, "deploy.py", data={"fork_ref": new_ref})
    assert run.ok, run.log[-4000:]
    assert "service_probe: generated" in run.log
    built = two_hosts.ssh(
        "rig1",
        "cat /opt/vllm-rig/current/src/vllm/.git/HEAD 2>/dev/null || git -C "
        "/opt/vllm-rig/current/src/vllm rev-parse HEAD",
        check=False,
    )
    assert new_ref in built or new_ref[:12] in two_hosts.ssh("rig1", "cat /opt/vllm-rig/current/runtime.json")
    assert _models(two_hosts, "rig1") == ["qwen-local"]


def test_driver_upgrade_to_answering_again(two_hosts: Rig) -> None:
    boots = machine.boots(machine.Machine("rig1"))
    new_ref = forge.manifest()["weicj/vLLM-2080Ti-Definitive"]["main"]  # rig1's runtime since the reboot test
    change = figures.driver_change(two_hosts, NEW_DRIVER, data={"fork_ref": new_ref}, limit="rig1")
    print(
        f"\ndriver {NEW_DRIVER}: settings changed -> service answering again in {change.answering:.1f}s "
        f"(deploy {change.wall:.1f}s, one reboot, not answering for {change.outage:.1f}s)"
    )
    assert machine.boots(machine.Machine("rig1")) == boots + 1
    assert "service_probe: generated" in change.run.log and "GPU verdict: PASS" in change.run.log
    assert change.unanswered  # the reboot did take the service down: the poller would have seen it
    assert 0 < change.outage <= change.answering <= change.wall + 5
    assert _models(two_hosts, "rig1") == ["qwen-local"]
    # Since the reboot: the start at boot and the start after the GPU verdict; no restart in between that the
    # verdict would stop again (on a real box each start loads 27B of weights for minutes).
    starts = two_hosts.ssh("rig1", "sudo journalctl -b -u vllm.service -o cat | grep -c '^Starting ' || true").strip()
    assert int(starts) == 2, two_hosts.ssh("rig1", "sudo journalctl -b -u vllm.service -o short-monotonic | tail -40")
