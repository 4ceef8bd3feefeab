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


@operation()
def lists_fresh(packages: Sequence[str], max_age_s: int = 86400):
    """`apt-get update` when a package about to be installed is not in the lists (a version published after
    the last refresh, a repository just added) or the lists are older than `max_age_s`; else nothing."""
    from vllm_rig.facts.apt_lists import LISTS_STAMP, AptLists, refresh_reason

    reason = refresh_reason(host.get_fact(AptLists, packages=tuple(packages)), tuple(packages), max_age_s)
    if reason is None:
        host.noop(f"package lists are fresh and know {', '.join(packages)}")
        return
    stamp = shlex.quote(LISTS_STAMP)
    # `|| :` is not there on purpose: a failed refresh (a repo down, a bad signature) stops the host here.
    yield f"apt-get -q -o DPkg::Lock::Timeout=600 update && mkdir -p $(dirname {stamp}) && touch {stamp}"
