"""Whole-rig scenarios on the sandbox: a reboot in the middle of a deploy, and the driver upgrade path timed from
the settings change to the service answering. (Two fresh hosts of two profiles in one run: test_upstream_kind.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e import figures, service
from tests.e2e.deploys import deploy, serving_rig, wait_new_boot
from tests.sandbox import machine, paths
from tests.sandbox.fixtures import forge

pytestmark = pytest.mark.sandbox
NEW_DRIVER = "580.159.04"


@pytest.fixture(scope="module")
def serving(rig: Rig) -> Rig:
    return serving_rig(rig)  # the defaults after a whole deploy (an earlier module's, kept, when there is one)


def _models(rig: Rig, name: str) -> list[str]:
    return service.models(service.api_key(rig, name), name)


def test_a_reboot_in_the_middle_of_a_deploy_converges_on_the_next_run(serving: Rig) -> None:
    m = machine.Machine("rig1")
    new_ref = forge.manifest()["weicj/vLLM-2080Ti-Definitive"]["main"]
    forge.write_knobs(build_seconds=40)
    args = [str(Path(sys.executable).with_name("pyinfra")), "-y", "inventory/sandbox.py", "deploy.py"]
    args += ["--limit", "rig1", "--data", f"fork_ref={new_ref}"]
    try:
        deploy_proc = subprocess.Popen(args, cwd=paths.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while "vllm-rig-build" not in serving.ssh("rig1", "systemctl list-units --no-legend 'vllm-rig-build*'"):
            assert time.monotonic() < deadline and deploy_proc.poll() is None, "the build never started"
            time.sleep(1)
        before = machine.boot_id(m)
        machine.ssh(m, "sudo systemctl reboot", check=False)
        wait_new_boot(m, before)
        assert deploy_proc.wait(timeout=300) != 0  # the run that lost its host fails
    finally:
        forge.write_knobs(build_seconds=2)
    run = deploy(serving, "deploy.py", data={"fork_ref": new_ref})
    assert run.ok, run.log[-4000:]
    assert "service_probe: generated" in run.log
    built = serving.ssh(
        "rig1",
        "cat /opt/vllm-rig/current/src/vllm/.git/HEAD 2>/dev/null || git -C "
        "/opt/vllm-rig/current/src/vllm rev-parse HEAD",
        check=False,
    )
    assert new_ref in built or new_ref[:12] in serving.ssh("rig1", "cat /opt/vllm-rig/current/runtime.json")
    assert _models(serving, "rig1") == ["qwen-local"]


def test_driver_upgrade_to_answering_again(serving: Rig) -> None:
    boots = machine.boots(machine.Machine("rig1"))
    new_ref = forge.manifest()["weicj/vLLM-2080Ti-Definitive"]["main"]  # rig1's runtime since the reboot test
    change = figures.driver_change(serving, NEW_DRIVER, data={"fork_ref": new_ref}, limit="rig1")
    print(
        f"\ndriver {NEW_DRIVER}: settings changed -> service answering again in {change.answering:.1f}s "
        f"(deploy {change.wall:.1f}s, one reboot, not answering for {change.outage:.1f}s)"
    )
    assert machine.boots(machine.Machine("rig1")) == boots + 1
    assert "service_probe: generated" in change.run.log and "GPU verdict: PASS" in change.run.log
    assert change.unanswered  # the reboot did take the service down: the poller would have seen it
    assert 0 < change.outage <= change.answering <= change.wall + 5
    assert _models(serving, "rig1") == ["qwen-local"]
    # Since the reboot: the start at boot and the start after the GPU verdict; no restart in between that the
    # verdict would stop again (on a real box each start loads 27B of weights for minutes).
    starts = serving.ssh("rig1", "sudo journalctl -b -u vllm.service -o cat | grep -c '^Starting ' || true").strip()
    assert int(starts) == 2, serving.ssh("rig1", "sudo journalctl -b -u vllm.service -o short-monotonic | tail -40")
