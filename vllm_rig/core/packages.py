"""Distribution packages: pyinfra's apt.packages, told to wait for the dpkg lock; the lists refreshed when a
package about to be installed is not in them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import apt

LOCK_WAIT = "-o DPkg::Lock::Timeout=600"  # unattended-upgrades holds the lock for minutes on a fresh box
APT_INSTALL = f"DEBIAN_FRONTEND=noninteractive apt-get -y -q {LOCK_WAIT} install --no-install-recommends"


def distro_packages(name: str, packages: Sequence[str]) -> None:
    """Install the packages that are missing, without recommends; never upgrades one that is there."""
    apt.packages(name=name, packages=list(packages), no_recommends=True, extra_install_args=LOCK_WAIT)


# Own operation: pyinfra's apt.update refreshes on age alone (cache_time); a package published after the last
# refresh, or a repository just added, needs a refresh however young the lists are.
@operation()
def lists_fresh(packages: Sequence[str], max_age_s: int = 86400):
    """`apt-get update` when a package about to be installed is not in the lists (a version published after
    the last refresh, a repository just added) or the lists are older than `max_age_s`; else nothing."""
    from vllm_rig.core.apt_lists import LISTS_STAMP, AptLists, refresh_reason

    reason = refresh_reason(host.get_fact(AptLists, packages=tuple(packages)), tuple(packages), max_age_s)
    if reason is None:
        host.noop(f"package lists are fresh and know {', '.join(packages)}")
        return
    stamp = shlex.quote(LISTS_STAMP)
    # `|| :` is not there on purpose: a failed refresh (a repo down, a bad signature) stops the host here.
    yield f"apt-get -q -o DPkg::Lock::Timeout=600 update && mkdir -p $(dirname {stamp}) && touch {stamp}"


def parse_packages(lines: list[str]) -> dict[str, str]:
    """Installed packages, name -> version, from dpkg-query's name, version and status columns (the driver's and
    preflight's batched facts). The status's second letter says installed ("ii", or "hi" when held); "un"/"rc"
    are packages dpkg knows but that are not there."""
    installed = {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 3 and parts[2].strip()[1:2] == "i":
            installed[parts[0]] = parts[1]
    return installed
