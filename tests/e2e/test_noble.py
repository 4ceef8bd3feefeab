"""The Ubuntu 24.04 path end to end: rig3, a machine that identifies as noble (bookworm underneath; see
tests/sandbox/README.md, "The Ubuntu 24.04 machine"), converges from nothing through the whole deploy with
one reboot, on NVIDIA's ubuntu2404 repository and Ubuntu's package names, and a second run changes nothing.

rig3 is made fresh here and taken down at the end, so the other scenario files keep deploying to rig1 (the
sandbox inventory lists the machines that run).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import DeployRun, deploy
from tests.sandbox import machine, rootfs
from tests.sandbox.fixtures import nvidia_repo

pytestmark = pytest.mark.sandbox
NAME = "rig3"
# NVIDIA's ubuntu2404 names for branch 580 and the proprietary flavour (group_data/all.py's default), as
# the Packages index of its CUDA repository (ubuntu2404/x86_64) spells them: the branch is in the name.
UBUNTU_DRIVER = {"libnvidia-compute-580", "nvidia-dkms-580", "nvidia-utils-580", "nvidia-compute-utils-580"}
DEBIAN_DRIVER = {"nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"}
# What the README's version table reads off the machine.
VERSIONS = ("base-files", "systemd", "apt", "dpkg", "libc6", "python3", "sudo", "openssh-server", "dkms")


@pytest.fixture(scope="module")
def noble(rig: Rig) -> Iterator[Rig]:
    m = machine.Machine(NAME)
    assert m.os == rootfs.UBUNTU2404
    machine.down(m)
    machine.create(m, fresh=True)
    machine.start(m)
    machine.wait_ssh(m, timeout=120)
    saved = os.environ.pop("VLLM_RIG_SANDBOX_MACHINES", None)  # the inventory then lists what runs: rig3 too
    try:
        yield Rig([m], rig.inventory, rig.key, rig.fileserver, rig.started)
    finally:
        if saved is not None:
            os.environ["VLLM_RIG_SANDBOX_MACHINES"] = saved
        machine.down(m)


def _boots_in_journal(rig: Rig) -> list[str]:
    """Boot ids the machine's own (persistent) journal has recorded, oldest first."""
    out = rig.ssh(NAME, "sudo journalctl --no-pager --list-boots")
    return [m.group(0) for m in (re.search(r"\b[0-9a-f]{32}\b", line) for line in out.splitlines()) if m]


def _boot_id(rig: Rig) -> str:
    return rig.ssh(NAME, "cat /proc/sys/kernel/random/boot_id").strip().replace("-", "")


def _run(rig: Rig) -> tuple[DeployRun, float]:
    t0 = time.monotonic()
    run = deploy(rig, "deploy.py", limit=NAME, timeout=1800)
    return run, time.monotonic() - t0


def test_the_machine_identifies_as_noble_before_the_deploy(noble: Rig) -> None:
    os_release = dict(line.split("=", 1) for line in noble.ssh(NAME, "cat /etc/os-release").splitlines() if "=" in line)
    identity = (os_release["ID"], os_release["VERSION_ID"], os_release["VERSION_CODENAME"])
    assert identity == ("ubuntu", '"24.04"', "noble")
    assert "DISTRIB_CODENAME=noble" in noble.ssh(NAME, "cat /etc/lsb-release")
    assert "sudo" in noble.ssh(NAME, "id -nG").split()
    kernel = noble.ssh(NAME, "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'linux-*'")
    installed = {line.split()[0] for line in kernel.splitlines() if line.split()[1:2] == ["ii"]}
    assert {"linux-generic", "linux-image-generic", "linux-headers-generic"} <= installed
    assert not noble.ssh(NAME, "ls /etc/apt/sources.list.d/").strip()  # nothing of NVIDIA's yet
    versions = noble.ssh(NAME, "dpkg-query -W " + " ".join(VERSIONS[:-1]))
    print(f"\n{NAME} before the deploy:\n{versions}")


def test_converges_from_nothing_with_one_reboot_on_the_ubuntu_path(noble: Rig) -> None:
    m = noble.machine(NAME)
    boots, first_boot = machine.boots(m), _boot_id(noble)
    assert _boots_in_journal(noble) == [first_boot]
    run, seconds = _run(noble)
    print(f"\nwhole deploy on {NAME}: {seconds:.0f}s, {len(run.changed)} operations changed the host")
    assert run.ok, run.log[-3000:]
    assert "Ubuntu 24.04 LTS" in run.log  # preflight's os line
    assert "service_probe: generated" in run.log  # the deploy proved generation, not just /health
    # Exactly one reboot: the supervisor booted it once more, and the machine's journal has two boots.
    assert machine.boots(m) == boots + 1
    assert _boots_in_journal(noble) == [first_boot, _boot_id(noble)]
    assert _boot_id(noble) != first_boot
    # The Ubuntu path: NVIDIA's ubuntu2404 repository, its pin file, Ubuntu's names installed and held.
    sources = noble.ssh(NAME, "cat /etc/apt/sources.list.d/*.list")
    assert nvidia_repo.repo_url("ubuntu2404") in sources and "debian12" not in sources
    assert noble.ssh(NAME, "test -f /etc/apt/preferences.d/cuda-repository-pin-600 && echo yes").strip() == "yes"
    installed = noble.ssh(NAME, "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-*' 'libnvidia-*'")
    names = {line.split()[0] for line in installed.splitlines() if line.split()[1:2] in (["ii"], ["hi"])}
    assert names >= UBUNTU_DRIVER and not names & DEBIAN_DRIVER, names
    assert set(noble.ssh(NAME, "apt-mark showhold").split()) >= UBUNTU_DRIVER
    assert "ubuntu" in noble.ssh(NAME, "dpkg-query -W -f='${Version}' dkms")  # the ubuntu2404 repo's dkms
    assert noble.ssh(NAME, "systemctl is-active vllm").strip() == "active"
    assert service.models(service.api_key(noble, NAME), NAME)
    print(noble.ssh(NAME, "dpkg-query -W " + " ".join(VERSIONS)))


def test_second_run_changes_nothing(noble: Rig) -> None:
    m = noble.machine(NAME)
    boots, boot = machine.boots(m), _boot_id(noble)
    run, seconds = _run(noble)
    print(f"\nsecond deploy on {NAME}: {seconds:.0f}s")
    assert run.ok, run.log[-3000:]
    assert run.changed == []
    assert (machine.boots(m), _boot_id(noble)) == (boots, boot)
