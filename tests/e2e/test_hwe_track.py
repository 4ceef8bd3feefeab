"""A noble box on the HWE kernel track gets the HWE track's headers (not the GA 6.8 track's), so the
next HWE kernel also gets headers and a DKMS module.

The machine is the sandbox's Debian 12 tree with noble's /etc/os-release (tests/sandbox/README.md); its
kernel image metapackage is the stand-in ubuntu2404 repo's linux-image-generic-hwe-24.04.
"""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import HOST_STAGE, deploy, fresh
from tests.e2e.test_archive_driver import _installed, _noble
from tests.sandbox.fixtures import nvidia_repo

pytestmark = pytest.mark.sandbox


def test_a_box_on_the_hwe_track_gets_its_headers(rig: Rig) -> None:
    m = fresh(rig, before_boot=_noble, secure_boot=False)
    image = next(nvidia_repo.repo_dir("ubuntu2404").glob("linux-image-generic-hwe-24.04_*.deb"))
    shutil.copy(image, m.dir / "var/tmp")
    rig.ssh("rig1", f"sudo dpkg -i /var/tmp/{image.name}")  # the box follows the HWE track
    run = deploy(rig, *HOST_STAGE)
    assert run.ok, run.error_line() + "\n" + run.log[-3000:]
    headers = _installed(rig, "linux-headers-*")
    assert "linux-headers-generic-hwe-24.04" in headers and "linux-headers-generic" not in headers, headers
    again = deploy(rig, *HOST_STAGE)
    assert again.ok and again.changed == [], again.changed
