"""Host stage on the sandbox: preflight, the pinned driver, CUDA, reboots and the GPU guard, in order.

One machine goes through the story a real box does: a Secure Boot stop, a fresh install with nouveau
loaded (one reboot), a no-op re-run, a planned driver upgrade (one reboot, hold moved), and a verdict
that notices a missing GPU and a missing NVLink bridge.
"""

from __future__ import annotations

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import deploy, fresh, set_knobs_and_reboot
from tests.sandbox import machine

OLD, NEW = "580.159.03", "580.159.04"
HOST_STAGE = ("tasks/preflight.py", "tasks/driver.py", "tasks/cuda.py")

pytestmark = pytest.mark.sandbox


def _smi(rig: Rig, query: str) -> list[str]:
    out = rig.ssh("rig1", f"nvidia-smi --query-gpu={query} --format=csv,noheader,nounits")
    return [line.strip() for line in out.splitlines()]


def test_secure_boot_stops_before_any_change(rig: Rig) -> None:
    fresh(rig, secure_boot=True)
    run = deploy(rig, *HOST_STAGE)
    assert not run.ok
    assert "disable Secure Boot" in run.log and "mokutil --import" in run.log  # both ways out
    assert run.changed == []
    leftovers = rig.ssh(
        "rig1",
        "ls /etc/apt/apt.conf.d/ | grep vllm-rig; dpkg -l 'nvidia-*' 2>/dev/null | grep ^ii | grep -v standin",
        check=False,
    )
    assert leftovers.strip() == ""


def test_fresh_box_with_nouveau_installs_and_reboots_once(rig: Rig) -> None:
    m = fresh(rig, secure_boot=False, nouveau=True)
    assert "nouveau" in rig.ssh("rig1", "ls /sys/module")
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data={"gpu_power_limit_w": 250})
    assert run.ok, run.log[-3000:]
    assert machine.boots(m) == boots + 1, "exactly one reboot"
    assert "nouveau" not in rig.ssh("rig1", "ls /sys/module")
    assert _smi(rig, "driver_version") == [OLD, OLD]
    assert _smi(rig, "persistence_mode,power.limit") == ["Enabled, 250.00", "Enabled, 250.00"]
    holds = rig.ssh("rig1", "apt-mark showhold").split()
    assert {"nvidia-driver-cuda", "nvidia-smi", "nvidia-kernel-dkms"} <= set(holds)
    assert rig.ssh("rig1", "systemctl is-enabled vllm-rig-gpu-guard.service").strip() == "enabled"
    assert "release 12.9" in rig.ssh("rig1", "/usr/local/cuda/bin/nvcc --version")
    assert rig.ssh("rig1", "readlink -f /usr/local/cuda").strip() == "/usr/local/cuda-12.9"


def test_second_run_changes_nothing_and_does_not_reboot(rig: Rig) -> None:
    m = rig.machine("rig1")
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data={"gpu_power_limit_w": 250})
    assert run.ok, run.log[-3000:]
    assert run.changed == []
    assert machine.boots(m) == boots


def test_power_limit_survives_a_reboot(rig: Rig) -> None:
    set_knobs_and_reboot(rig, rig.machine("rig1"))
    assert _smi(rig, "power.limit") == ["250.00", "250.00"]  # the guard set it again at boot


def test_planned_upgrade_moves_the_hold_and_reboots_once(rig: Rig) -> None:
    m = rig.machine("rig1")
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": NEW, "gpu_power_limit_w": 250})
    assert run.ok, run.log[-3000:]
    assert machine.boots(m) == boots + 1
    assert _smi(rig, "driver_version") == [NEW, NEW]
    versions = rig.ssh("rig1", "dpkg-query -W -f='${Version}\\n' nvidia-driver-cuda nvidia-smi").split()
    assert versions == [f"{NEW}-1", f"{NEW}-1"]
    assert "nvidia-driver-cuda" in rig.ssh("rig1", "apt-mark showhold").split()
    again = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": NEW, "gpu_power_limit_w": 250})
    assert again.ok and again.changed == [] and machine.boots(m) == boots + 1


def test_a_driver_someone_else_installed_is_not_replaced(rig: Rig) -> None:
    rig.ssh("rig1", "sudo mv /var/lib/vllm-rig/driver-version /root/driver-version")  # as if installed by hand
    run = deploy(rig, *HOST_STAGE)  # the settings' OLD would downgrade it
    assert not run.ok and "nvidia_driver_replace_existing=true" in run.log and run.changed == []
    assert _smi(rig, "driver_version") == [NEW, NEW]
    rig.ssh("rig1", "sudo mv /root/driver-version /var/lib/vllm-rig/driver-version")


def test_verdict_reports_missing_bridge_and_missing_gpu(rig: Rig) -> None:
    m = rig.machine("rig1")
    set_knobs_and_reboot(rig, m, nvlink_bridge=False)
    run = deploy(rig, "tasks/preflight.py", data={"nvidia_driver_version": NEW})
    assert run.ok and "no NVLink" in run.log and "seat the NVLink bridge" in run.log
    set_knobs_and_reboot(rig, m, nvlink_bridge=True, missing_gpus=[1])
    run = deploy(rig, "tasks/preflight.py", data={"nvidia_driver_version": NEW})
    assert not run.ok and "nvidia-smi sees 1 GPU(s), need 2" in run.log
    set_knobs_and_reboot(rig, m, missing_gpus=[])
