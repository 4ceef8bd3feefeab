"""The installed versions of named distribution packages, in one short command.

pyinfra's DebPackages runs `dpkg -l`, which lists every package on the box (~1500 on an Ubuntu server with
CUDA), once per apt operation; asking dpkg for the few names an operation needs is cheaper.
"""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from vllm_rig.facts.host import parse_packages


class PackageVersions(FactBase):
    """name -> version for each of `packages` that is installed (absent ones are missing from the dict)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}  # pyinfra answers this when the command printed nothing: none of them is installed

    def command(self, packages: tuple[str, ...]) -> str:
        fmt = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"
        return f"dpkg-query -W -f={shlex.quote(fmt)} {shlex.join(packages)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        # Multi-Arch: same packages print as name:arch.
        return {name.split(":")[0]: version for name, version in parse_packages(output).items()}
