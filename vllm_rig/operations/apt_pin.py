"""The pinned driver: install or move to an exact version with NVIDIA's pinning package, then hold it."""

from __future__ import annotations

import fnmatch
import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.driver_packages import HOLD_PATTERNS, DriverSet
from vllm_rig.facts.driver import DriverState

APT = (
    "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 "
    '-o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold"'
)


def installed_at(packages: dict[str, str], names: tuple[str, ...], version: str) -> bool:
    """Every name installed at `version` (Debian revisions such as -1 or -1ubuntu1 allowed)."""
    return all(packages.get(n, "").split("-", 1)[0] == version for n in names)


def held_candidates(packages: dict[str, str]) -> list[str]:
    return sorted(n for n in packages if any(fnmatch.fnmatch(n, p) for p in HOLD_PATTERNS))


@operation()
def pinned_driver(driver: DriverSet, version: str):
    """Install the driver set at exactly `version`: pinning package first (so apt resolves every component
    to that version), then the packages. A planned upgrade unholds, moves, and the hold op holds again."""
    state = host.get_fact(DriverState)
    if driver.pinning in state["packages"] and installed_at(state["packages"], driver.packages, version):
        host.noop(f"NVIDIA driver {version} is installed")
        return
    if driver.utils not in state["packages"] and state["loaded_version"] == version:
        # The right driver, installed some other way (runfile, a container host): never install over it.
        host.noop(f"NVIDIA driver {version} is loaded but not from packages; left alone")
        return
    held = [n for n in state["holds"] if n in held_candidates(state["packages"])]
    if held:
        yield "apt-mark unhold " + " ".join(shlex.quote(n) for n in held)
    yield f"{APT} install {shlex.quote(driver.pinning)}"
    names = " ".join(shlex.quote(n) for n in driver.packages)
    yield f"{APT} install --allow-downgrades --allow-change-held-packages {names}"


@operation()
def hold_driver():
    """apt-mark hold every installed driver package that is not held yet (unattended or careless upgrades
    would otherwise move userspace away from the loaded module)."""
    state = host.get_fact(DriverState)
    missing = [n for n in held_candidates(state["packages"]) if n not in state["holds"]]
    if not missing:
        host.noop("driver packages are held")
        return
    yield "apt-mark hold " + " ".join(shlex.quote(n) for n in missing)
