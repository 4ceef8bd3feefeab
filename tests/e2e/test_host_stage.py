"""Host stage on the sandbox: preflight, the pinned driver, CUDA, reboots and the GPU guard, in order.

One machine goes through the story a real box does: a Secure Boot stop, a fresh install with nouveau
loaded (one reboot), a no-op re-run, a planned driver upgrade (one reboot, hold moved), and a verdict
that notices a missing GPU and a missing NVLink bridge.
"""

from __future__ import annotations

import re

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
    # Debian's dkms signs with /var/lib/dkms/mok.*, which a fresh box does not have yet: make, enroll, confirm.
    assert "dkms signs with /var/lib/dkms/mok.pub, which is not there yet" in run.log
    assert (
        "1) make the key: sudo openssl req" in run.log
        and "2) enroll it: sudo mokutil --import /var/lib/dkms/mok.pub" in run.log
    )
    assert "Enroll MOK in MokManager" in run.log and "secure_boot_mok_enrollment=deploy_stages" in run.log
    assert run.changed == []
    leftovers = rig.ssh(
        "rig1",
        "ls /etc/apt/apt.conf.d/ | grep vllm-rig; dpkg -l 'nvidia-*' 2>/dev/null | grep ^ii | grep -v standin",
        check=False,
    )
    assert leftovers.strip() == ""


STAGE_MOK = {"secure_boot_mok_enrollment": "deploy_stages", "secure_boot_mok_password": "one-time pw"}


def test_secure_boot_deploy_stages_the_key_and_deploys_once_it_is_enrolled(rig: Rig) -> None:
    m = fresh(rig, secure_boot=True, mok_console_confirms=True)  # someone will answer MokManager
    staged = deploy(rig, *HOST_STAGE, data=STAGE_MOK)
    assert not staged.ok and "the enrollment of /var/lib/dkms/mok.pub is staged" in staged.error_line()
    ops = re.findall(r"--> Starting operation: (.*?) *\n", staged.log)
    assert ops == [  # the staging, then the stop: nothing of the driver went in
        "Driver | Secure Boot: stage the enrollment of dkms's signing key",
        "Driver | Secure Boot: dkms's key is enrolled before the driver goes in",
    ], ops
    assert "SHA1 Fingerprint" in rig.ssh("rig1", "sudo mokutil --list-new")
    assert rig.ssh("rig1", "dpkg -l 'nvidia-*' 2>/dev/null | grep ^ii | grep -v standin", check=False).strip() == ""
    set_knobs_and_reboot(rig, m)  # the owner reboots at the console and confirms
    cert = "/var/lib/dkms/mok.pub"
    assert rig.ssh("rig1", f"sudo mokutil --test-key {cert}", check=False).strip() == f"{cert} is already enrolled"
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data=STAGE_MOK)
    assert run.ok, run.log[-3000:]
    assert f"dkms signs with {cert}, which is enrolled" in run.log
    assert machine.boots(m) == boots + 1, "exactly one reboot"
    assert _smi(rig, "driver_version") == [OLD, OLD]  # the signed module loaded under Secure Boot
    again = deploy(rig, *HOST_STAGE, data=STAGE_MOK)
    assert again.ok and again.changed == [] and machine.boots(m) == boots + 1


def test_open_flavour_on_a_small_bar1_card_stops_before_the_driver(rig: Rig) -> None:
    fresh(rig, bar1_mib=256)
    run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_flavor": "open"})
    assert not run.ok and run.changed == []
    assert "BAR1 (lspci Region 1) 0000:01:00.0 256 MiB, 0000:02:00.0 256 MiB is smaller" in run.log
    assert "nvidia_driver_flavor=proprietary" in run.log
    assert rig.ssh("rig1", "dpkg -l 'nvidia-*' 2>/dev/null | grep ^ii | grep -v standin", check=False).strip() == ""
    proprietary = deploy(rig, "tasks/preflight.py")  # the default flavour maps BAR1 dynamically
    assert proprietary.ok and "BAR1 (lspci" not in proprietary.log


def test_secure_boot_without_mokutil_and_a_second_cuda_source_are_named(rig: Rig) -> None:
    fresh(rig, secure_boot=True)
    rig.ssh("rig1", "sudo dpkg -r mokutil >/dev/null")
    rig.ssh(
        "rig1",
        "echo 'deb http://127.0.0.1:1/nvidia/cuda/repos/debian12/x86_64/ /' "
        "| sudo tee /etc/apt/sources.list.d/cuda.list",
    )
    run = deploy(rig, "tasks/preflight.py")
    assert not run.ok and run.changed == []
    # the EFI variable says Secure Boot is on; without mokutil the key cannot be tested
    assert "enabled; cannot tell whether /var/lib/dkms/mok.pub is enrolled (mokutil is not installed)" in run.log
    assert "sudo apt-get install mokutil" in run.log and "not reported" not in run.log
    assert "/etc/apt/sources.list.d/cuda.list also names NVIDIA's CUDA repository" in run.log
    assert "remove /etc/apt/sources.list.d/cuda.list" in run.log


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
    assert run.ok and "the NVLink bridge is down" in run.log and "seat the NVLink bridge" in run.log
    set_knobs_and_reboot(rig, m, nvlink_bridge=True, missing_gpus=[1])
    run = deploy(rig, "tasks/preflight.py", data={"nvidia_driver_version": NEW})
    assert not run.ok and "nvidia-smi sees 1 GPU(s), need 2" in run.log
    set_knobs_and_reboot(rig, m, missing_gpus=[])


def test_a_module_that_never_loads_reboots_once_and_says_why(rig: Rig) -> None:
    """The booted kernel has no nvidia module and DKMS cannot build one (as after a kernel update whose
    build fails). The container cannot boot another kernel, so the module is removed for this one."""
    m = rig.machine("rig1")
    data = {"nvidia_driver_version": NEW}
    k = "$(uname -r)"
    rig.ssh("rig1", f"sudo rm -rf /var/lib/dkms/nvidia/{NEW}/{k} /lib/modules/{k}/updates && sudo depmod -a {k}")
    set_knobs_and_reboot(rig, m, dkms_build_fails=[NEW])  # the boot guard's own rebuild fails too
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data=data)
    assert not run.ok and machine.boots(m) == boots + 1, "one reboot"
    line = run.error_line()
    assert f"nvidia {NEW} is still not loaded after a reboot for it" in line, line
    assert f"the DKMS build failed, see /var/lib/dkms/nvidia/{NEW}/build/make.log (it ends: " in line, line
    again = deploy(rig, *HOST_STAGE, data=data)
    assert not again.ok and machine.boots(m) == boots + 1, "no second reboot"
    assert "not rebooting again" in again.error_line() and again.changed == []
    set_knobs_and_reboot(rig, m, dkms_build_fails=[])  # fixed: the guard's rebuild works at boot
    fixed = deploy(rig, *HOST_STAGE, data=data)
    assert fixed.ok, fixed.log[-3000:]
    assert _smi(rig, "driver_version") == [NEW, NEW]
    assert deploy(rig, *HOST_STAGE, data=data).changed == []
