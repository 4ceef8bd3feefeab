"""Host stage against NVIDIA's and Ubuntu's real packaging behaviour, on the sandbox.

One machine, in order: a first boot where unattended-upgrades holds the dpkg lock (waited out, not
failed), a driver version the repo publishes after the box last refreshed its lists (installs),
persistence and the power limit across a restart of nvidia-persistenced (Ubuntu-style unit), and a
root login on a box without sudo (deploys, changes nothing).
"""

from __future__ import annotations

import functools
import os
import shutil
import time

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import HOST_STAGE, deploy, fresh
from tests.sandbox import first_boot, machine
from tests.sandbox.fixtures import nvidia_repo

OLD, LATER = "580.159.03", "580.159.05"
LOCK_S = 75
LIMIT = {"gpu_power_limit_w": 200}

pytestmark = pytest.mark.sandbox


def _smi(rig: Rig, query: str) -> list[str]:
    out = rig.ssh("rig1", f"nvidia-smi --query-gpu={query} --format=csv,noheader,nounits")
    return [line.strip() for line in out.splitlines()]


def test_dpkg_lock_held_at_first_boot_is_waited_out(rig: Rig) -> None:
    hold = functools.partial(first_boot.unattended_upgrades_holding_lock, seconds=LOCK_S)
    m = fresh(rig, before_boot=hold, secure_boot=False)
    begun = time.time()
    # the stand-in holds the lock the way the real one does: dpkg itself refuses at once
    refused = machine.ssh(m, "sudo dpkg -i /nonexistent.deb", check=False)
    assert refused.returncode != 0 and "lock" in (refused.stdout + refused.stderr), refused.stderr
    run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": OLD, **LIMIT})
    assert run.ok, run.error_line() + "\n" + run.log[-3000:]
    start, end = map(int, rig.ssh("rig1", f"cat {first_boot.RECORD}").split())
    assert end > begun + 5, "the lock was still held while the deploy ran"
    assert rig.ssh("rig1", "dpkg-query -W -f='${Version}' cuda-keyring").strip() == "1.1-1"
    assert _smi(rig, "driver_version") == [OLD, OLD]


def test_a_driver_published_after_the_last_refresh_installs(rig: Rig) -> None:
    try:
        nvidia_repo.publish(LATER)  # the box's lists (refreshed minutes ago) do not know it
        known = rig.ssh("rig1", f"apt-cache policy nvidia-driver-pinning-{LATER}")
        assert "Candidate" not in known
        run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": LATER, **LIMIT})
        assert run.ok, run.error_line() + "\n" + run.log[-3000:]
        assert _smi(rig, "driver_version") == [LATER, LATER]
        again = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": LATER, **LIMIT})
        assert again.ok and again.changed == [], again.changed  # fresh lists that know it: no refresh
    finally:
        nvidia_repo.publish()


def test_persistence_and_power_limit_survive_a_restart_of_the_daemon(rig: Rig) -> None:
    shown = rig.ssh("rig1", "systemctl show -p ExecStart nvidia-persistenced.service")
    assert "--persistence-mode" in shown and "--no-persistence-mode" not in shown
    assert _smi(rig, "persistence_mode,power.limit") == ["Enabled, 200.00", "Enabled, 200.00"]
    rig.ssh("rig1", "sudo systemctl restart nvidia-persistenced.service")
    time.sleep(2)
    assert _smi(rig, "persistence_mode,power.limit") == ["Enabled, 200.00", "Enabled, 200.00"]
    # stopping the daemon really drops both (the stand-in is not lenient): the guard's re-run set them again
    rig.ssh("rig1", "sudo systemctl stop nvidia-persistenced.service")
    assert _smi(rig, "persistence_mode,power.limit") == ["Disabled, 250.00", "Disabled, 250.00"]
    rig.ssh("rig1", "sudo systemctl start vllm-rig-gpu-guard.service")
    assert _smi(rig, "persistence_mode,power.limit") == ["Enabled, 200.00", "Enabled, 200.00"]


def test_root_login_on_a_box_without_sudo_deploys(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    m = rig.machine("rig1")
    root_ssh = m.dir / "root/.ssh"
    root_ssh.mkdir(mode=0o700, exist_ok=True)
    shutil.copy(m.dir / "home/rig/.ssh/authorized_keys", root_ssh / "authorized_keys")
    os.chown(root_ssh / "authorized_keys", 0, 0)
    sudo = m.dir / "usr/bin/sudo"
    sudo.rename(sudo.with_name("sudo.off"))
    try:
        monkeypatch.setenv("VLLM_RIG_SANDBOX_SSH_USER", "root")
        run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_version": LATER, **LIMIT})
        assert "sudo: not found" not in run.log and "could not load fact" not in run.log
        assert run.ok and run.changed == [], run.error_line()
    finally:
        sudo.with_name("sudo.off").rename(sudo)
