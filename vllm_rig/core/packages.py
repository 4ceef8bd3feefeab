"""Distribution packages installed by name, read with one dpkg query for just those names."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command

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
    from vllm_rig.core.apt_lists import LISTS_STAMP, AptLists, refresh_reason

    reason = refresh_reason(host.get_fact(AptLists, packages=tuple(packages)), tuple(packages), max_age_s)
    if reason is None:
        host.noop(f"package lists are fresh and know {', '.join(packages)}")
        return
    stamp = shlex.quote(LISTS_STAMP)
    # `|| :` is not there on purpose: a failed refresh (a repo down, a bad signature) stops the host here.
    yield f"apt-get -q -o DPkg::Lock::Timeout=600 update && mkdir -p $(dirname {stamp}) && touch {stamp}"


# The installed versions of named distribution packages, in one short command.
class PackageVersions(SectionFact[dict[str, str]]):
    """name -> version for each of `packages` that is installed (absent ones are missing from the dict)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, packages: tuple[str, ...]) -> str:
        fmt = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"
        return section_command({"dpkg": f"dpkg-query -W -f={shlex.quote(fmt)} {shlex.join(packages)} 2>/dev/null"})

    def parse(self, sections: Sections) -> dict[str, str]:
        # Multi-Arch: same packages print as name:arch.
        return {name.split(":")[0]: version for name, version in parse_packages(sections.lines("dpkg")).items()}


def parse_packages(lines: list[str]) -> dict[str, str]:
    """Installed packages, name -> version. The status's second letter says installed ("ii", or "hi" when
    held); "un"/"rc" are packages dpkg knows but that are not there."""
    installed = {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 3 and parts[2].strip()[1:2] == "i":
            installed[parts[0]] = parts[1]
    return installed
