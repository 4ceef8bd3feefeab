"""A box that already runs Ubuntu's archive driver (nvidia-driver-580 from noble-updates, at a higher
version than NVIDIA's pin) with Canonical's signed linux-modules-nvidia-580-*: refused without a choice,
kept as it is (pinned, held, no DKMS swap, no reboot), then replaced by NVIDIA's pinned DKMS driver.

The machine is the sandbox's Debian 12 tree with noble's /etc/os-release, so the deploy takes the
ubuntu2404 path (NVIDIA's Ubuntu names, the stand-in ubuntu2404 repo); see tests/sandbox/README.md.
"""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import HOST_STAGE, deploy, fresh, set_knobs_and_reboot
from tests.sandbox import machine
from tests.sandbox.fixtures import nvidia_repo
from tests.sandbox.fixtures.nvidia_repo import catalog

ARCHIVE, NVIDIA = catalog.ARCHIVE_VERSION, "580.159.03"
LIMIT = {"gpu_power_limit_w": 200}
NOBLE = (
    'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nVERSION="24.04.3 LTS (Noble Numbat)"\n'
    "VERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\nUBUNTU_CODENAME=noble\n"
)

pytestmark = pytest.mark.sandbox


def _smi(rig: Rig, query: str) -> list[str]:
    out = rig.ssh("rig1", f"nvidia-smi --query-gpu={query} --format=csv,noheader,nounits")
    return [line.strip() for line in out.splitlines()]


def _noble(root) -> None:
    target = root / "etc/os-release"
    if target.is_symlink():
        target.unlink()
    target.write_text(NOBLE)
    (root / "usr/lib/os-release").write_text(NOBLE)


def _installed(rig: Rig, pattern: str) -> dict[str, str]:
    out = rig.ssh(
        "rig1", f"dpkg-query -W -f='${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' '{pattern}'", check=False
    )
    return {p[0]: p[1] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[2][1] == "i"}


def test_archive_driver_box_is_refused_without_a_choice(rig: Rig) -> None:
    m = fresh(rig, before_boot=_noble, secure_boot=False)
    debs = m.dir / "var/tmp/archive"
    debs.mkdir(parents=True, exist_ok=True)
    for deb in nvidia_repo.archive_driver_debs():
        shutil.copy(deb, debs)
    rig.ssh("rig1", "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q /var/tmp/archive/*.deb", timeout=300)
    set_knobs_and_reboot(rig, m)  # Canonical's module loads at boot, as on the real box
    assert _smi(rig, "driver_version") == [ARCHIVE, ARCHIVE]
    run = deploy(rig, *HOST_STAGE, data=LIMIT)
    assert not run.ok and "nvidia_keep_archive_driver=true" in run.log and run.changed == []
    assert "Canonical's signed modules" in run.log


def test_archive_driver_kept_as_it_is(rig: Rig) -> None:
    m = rig.machine("rig1")
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data={"nvidia_keep_archive_driver": True, **LIMIT})
    assert run.ok, run.error_line() + "\n" + run.log[-3000:]
    assert machine.boots(m) == boots, "a kept driver needs no reboot"
    assert _smi(rig, "driver_version,power.limit") == [f"{ARCHIVE}, 200.00", f"{ARCHIVE}, 200.00"]
    assert not _installed(rig, "nvidia-dkms-*") and "nvidia-driver-pinning-" not in " ".join(
        _installed(rig, "nvidia-*")
    )
    holds = set(rig.ssh("rig1", "apt-mark showhold").split())
    assert {"nvidia-utils-580", "libnvidia-compute-580", "linux-modules-nvidia-580-generic"} <= holds
    pin = rig.ssh("rig1", "cat /etc/apt/preferences.d/vllm-rig-archive-driver")
    assert f"Pin: version {ARCHIVE}-0ubuntu0.24.04.1" in pin
    # NVIDIA's repo (added for CUDA) offers 580.159.x at pin-600: apt still keeps the archive build
    policy = rig.ssh("rig1", "apt-cache policy nvidia-utils-580")
    assert f"Candidate: {ARCHIVE}-0ubuntu0.24.04.1" in policy, policy
    again = deploy(rig, *HOST_STAGE, data={"nvidia_keep_archive_driver": True, **LIMIT})
    assert again.ok and again.changed == [], again.changed


def test_archive_driver_replaced_by_nvidias(rig: Rig) -> None:
    m = rig.machine("rig1")
    boots = machine.boots(m)
    run = deploy(rig, *HOST_STAGE, data={"nvidia_driver_replace_existing": True, **LIMIT})
    assert run.ok, run.error_line() + "\n" + run.log[-3000:]
    assert machine.boots(m) == boots + 1
    assert _smi(rig, "driver_version,power.limit") == [f"{NVIDIA}, 200.00", f"{NVIDIA}, 200.00"]
    assert not _installed(rig, "linux-modules-nvidia-*")
    assert _installed(rig, "nvidia-utils-580")["nvidia-utils-580"] == f"{NVIDIA}-1ubuntu1"
    assert "nvidia-dkms-580" in _installed(rig, "nvidia-dkms-*")
    left = {n: v for n, v in _installed(rig, "*nvidia*").items() if "0ubuntu" in v}
    assert left == {}, f"archive builds left beside NVIDIA's: {left}"
    assert rig.ssh("rig1", "test -e /etc/apt/preferences.d/vllm-rig-archive-driver || echo gone").strip() == "gone"
    again = deploy(rig, *HOST_STAGE, data={"nvidia_driver_replace_existing": True, **LIMIT})
    assert again.ok and again.changed == [] and machine.boots(m) == boots + 1, again.changed
