"""Driver state read at execute time, in one command: what dpkg has, what the kernel has loaded, holds,
nouveau, the boot id. Decides upgrades and reboots (`_if=` callables read it after earlier steps ran)."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.facts.host import parse_holds, parse_packages, split_sections

SECTIONS = {
    "packages": (
        "dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'libcuda1' 'cuda-*' 'dkms' 'linux-headers-*' "
        "'linux-modules-nvidia-*' 'linux-generic*' 'linux-image-generic*' 2>/dev/null || true"
    ),
    "loaded": "cat /sys/module/nvidia/version 2>/dev/null || true",
    "nouveau": "test -d /sys/module/nouveau && echo loaded || true",
    "boot_id": "cat /proc/sys/kernel/random/boot_id",
}


class DriverState(FactBase):
    def command(self) -> str:
        return "sh -c " + shlex.quote("; ".join(f"echo @@{k}; {{ {v}; }}" for k, v in SECTIONS.items()))

    def process(self, output: list[str]) -> dict[str, Any]:
        raw = split_sections(output)
        loaded = [line.strip() for line in raw.get("loaded", []) if line.strip()]
        return {
            "packages": parse_packages(raw.get("packages", [])),
            "holds": parse_holds(raw.get("packages", [])),
            "loaded_version": loaded[0] if loaded else None,
            "nouveau_loaded": bool([x for x in raw.get("nouveau", []) if x.strip()]),
            "boot_id": next((x.strip() for x in raw.get("boot_id", []) if x.strip()), None),
        }


class BootId(FactBase):
    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    def process(self, output: list[str]) -> str:
        return output[0].strip()


class FileText(FactBase):
    """A small file's text, or None when it does not exist (stamps, markers)."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return "\n".join(output) if output else None

    @staticmethod
    def default() -> None:
        return None
