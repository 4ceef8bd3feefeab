"""The pinned driver: install or move to an exact version with NVIDIA's pinning package, then hold it."""

from __future__ import annotations

import fnmatch
import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.stages.driver.facts import DriverState
from vllm_rig.stages.driver.packages import ARCHIVE_HOLD_PATTERNS, HOLD_PATTERNS, DriverSet, archive_moves, archive_only

ARCHIVE_PIN_FILE = "/etc/apt/preferences.d/vllm-rig-archive-driver"
APT = (
    "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 "
    '-o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold"'
)


def installed_at(packages: dict[str, str], names: tuple[str, ...], version: str) -> bool:
    """Every name installed at `version` (Debian revisions such as -1 or -1ubuntu1 allowed)."""
    return all(packages.get(n, "").split("-", 1)[0] == version for n in names)


def held_candidates(packages: dict[str, str], patterns: tuple[str, ...] = HOLD_PATTERNS) -> list[str]:
    return sorted(n for n in packages if any(fnmatch.fnmatch(n, p) for p in patterns))


def archive_pin(packages: dict[str, str], patterns: tuple[str, ...]) -> str:
    """apt preferences that keep a kept archive driver at the versions installed: priority 1000 beats the
    NVIDIA repo's pin-600 (which the CUDA stage's keyring brings) and any newer archive build."""
    by_version: dict[str, list[str]] = {}
    for name in held_candidates(packages, patterns):
        by_version.setdefault(packages[name], []).append(name)
    stanzas = [
        f"Package: {' '.join(names)}\nPin: version {version}\nPin-Priority: 1000\n"
        for version, names in sorted(by_version.items())
    ]
    head = "# Written by vllm-rig: Ubuntu's archive driver stays as installed (nvidia_keep_archive_driver).\n"
    return head + "\n".join(stanzas)


# Own operation: pyinfra's apt.packages installs name=version but cannot put the pinning package first, move
# held packages, purge the archive's driver, or leave a driver it did not install alone.
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
    held = [n for n in state["holds"] if n in held_candidates(state["packages"], ARCHIVE_HOLD_PATTERNS)]
    if held:
        yield "apt-mark unhold " + " ".join(shlex.quote(n) for n in held)
    # Replacing Ubuntu's archive driver: Canonical's modules need the archive's userspace, so they go first.
    leaving = archive_only(state["packages"], driver)
    if leaving:
        yield f"{APT} purge " + " ".join(shlex.quote(n) for n in leaving)
        yield f"rm -f {ARCHIVE_PIN_FILE}"
    yield f"{APT} install {shlex.quote(driver.pinning)}"
    names = " ".join(shlex.quote(n) for n in (*driver.packages, *archive_moves(state["packages"], driver, leaving)))
    yield f"{APT} install --allow-downgrades --allow-change-held-packages {names}"


# Own operation: pyinfra has no apt-mark hold.
@operation()
def hold_driver(patterns: tuple[str, ...] = HOLD_PATTERNS):
    """apt-mark hold every installed driver package that is not held yet (unattended or careless upgrades
    would otherwise move userspace away from the loaded module)."""
    state = host.get_fact(DriverState)
    missing = [n for n in held_candidates(state["packages"], patterns) if n not in state["holds"]]
    if not missing:
        host.noop("driver packages are held")
        return
    yield "apt-mark hold " + " ".join(shlex.quote(n) for n in missing)
