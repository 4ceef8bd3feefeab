"""Distribution packages installed by name, read with one dpkg query for just those names."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.facts.packages import PackageVersions

APT_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 install --no-install-recommends"


@operation()
def distro_packages(packages: Sequence[str]):
    """Install the packages that are missing, without recommends; never upgrades one that is there."""
    found = host.get_fact(PackageVersions, packages=tuple(packages))
    missing = [p for p in packages if p not in found]
    if not missing:
        host.noop(f"{len(packages)} package(s) installed: {', '.join(packages)}")
        return
    yield f"{APT_INSTALL} {shlex.join(missing)}"
