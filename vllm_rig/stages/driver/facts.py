"""Driver state read at execute time, in one command: what dpkg has, what the kernel has loaded, holds,
nouveau, the boot id. Decides upgrades and reboots (`_if=` callables read it after earlier steps ran)."""

from __future__ import annotations

import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.packages import parse_packages
from vllm_rig.stages.preflight.facts import parse_holds

SECTIONS = {
    "packages": (
        "dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'libcuda1' 'cuda-*' 'dkms' 'linux-headers-*' "
        "'linux-modules-nvidia-*' 'linux-generic*' 'linux-image-generic*' 2>/dev/null"
    ),
    "loaded": "cat /sys/module/nvidia/version 2>/dev/null",
    "nouveau": "test -d /sys/module/nouveau && echo loaded",
    "boot_id": "cat /proc/sys/kernel/random/boot_id",
    "kernel": "uname -r",
}


class Driver(TypedDict):
    packages: dict[str, str]  # installed name -> version
    holds: list[str]
    loaded_version: str | None  # the loaded nvidia module's version
    nouveau_loaded: bool
    boot_id: str | None
    kernel: str | None


class DriverState(SectionFact[Driver]):
    DEFAULT: Driver = {
        "packages": {},
        "holds": [],
        "loaded_version": None,
        "nouveau_loaded": False,
        "boot_id": None,
        "kernel": None,
    }

    def command(self) -> str:
        return section_command(SECTIONS)

    def parse(self, sections: Sections) -> Driver:
        return {
            "packages": parse_packages(sections.lines("packages")),
            "holds": parse_holds(sections.lines("packages")),
            "loaded_version": sections.first("loaded"),
            "nouveau_loaded": sections.first("nouveau") is not None,
            "boot_id": sections.required("boot_id"),
            "kernel": sections.required("kernel"),
        }


# Kernel lines that say why nvidia.ko did not load or did not bring the GPUs up: the kernel's refusals of an
# unsigned module (kernel/module/signing.c; security/lockdown/lockdown.c's "Lockdown: modprobe: unsigned module
# loading is restricted"), modprobe's and systemd-modules-load's failed insert (whatever errno, in whatever
# language), the open modules' static BAR1 check, the driver's own lines without an Xid (host/nvrm.py:
# RmInitAdapter failed, fallen off the bus, the probe failed, a GPU the release or the open module does not
# support, a BAR the firmware left unassigned, no power cables) with the continuation lines of its
# multi-line messages, and its Xid lines. "module verification failed: ... tainting kernel" is kept too, not
# as a refusal (the kernel loaded that module) but so that its presence is never read as one.
# Anchored at the message's start (journalctl -o cat), so that sudo's own log line of this very command,
# which carries the pattern, never matches.
REFUSAL_PATTERN = (
    "^(Loading of .* is rejected|[a-z_-]+: ERROR: could not insert '?nvidia|Failed to insert module '?nvidia|"
    "Lockdown: [^ ]+: (unsigned module loading|Loading of unsigned module) is restricted|"
    "[a-z_]+: module verification failed|"
    "NVRM: kbusIsStaticBar1Supported|NVRM: (GPU .*: )?RmInitAdapter failed|NVRM: GPU .*has fallen off the bus|"
    "NVRM: GPU .*: GPU does not have the necessary power cables|NVRM: Xid |"
    "NVRM: The NVIDIA GPU |NVRM: installed in this system|NVRM: (NVIDIA [0-9.]+ driver release|nvidia\\.ko because|"
    "System Processor)|NVRM: This PCI I/O region|NVRM: BAR[0-9] is|"
    "NVRM: fallen off the bus|NVRM: The NVIDIA probe routine failed)"
)


class ModuleDiagnosis(TypedDict):
    kernel: str | None
    module_file: str | None  # the nvidia.ko modprobe would load for the running kernel
    dkms: list[str]
    make_log: list[str]  # the make.log's path, then its last lines
    journal: list[str]


class ModuleFailure(SectionFact[ModuleDiagnosis]):
    """What there is to say about an nvidia module that does not load: the module file modprobe would
    take for the running kernel, dkms's status, the end of a failed build's make.log, and the kernel's
    refusal lines of this boot (the journal holds the kernel log on systemd boxes)."""

    def command(self, version: str) -> str:
        v = shlex.quote(version)
        parts = {
            "kernel": "uname -r",
            "module": 'modinfo -k "$(uname -r)" -n nvidia 2>&1 | head -n 1',
            "dkms": f"dkms status -m nvidia -v {v} 2>&1 | head -n 3",
            "makelog": f'l=/var/lib/dkms/nvidia/{v}/build/make.log; [ -f "$l" ] && echo "$l" && tail -n 3 "$l"',
            "journal": (
                "LC_ALL=C journalctl -b --no-pager -o cat 2>/dev/null | "
                f"grep -E {shlex.quote(REFUSAL_PATTERN)} | tail -n 60"
            ),
        }
        return section_command(parts)

    DEFAULT: ModuleDiagnosis = {"kernel": None, "module_file": None, "dkms": [], "make_log": [], "journal": []}

    def parse(self, sections: Sections) -> ModuleDiagnosis:
        module = sections.first("module") or ""
        return {
            "kernel": sections.first("kernel"),
            "module_file": module if module.startswith("/") else None,
            "dkms": sections.words("dkms"),
            "make_log": sections.words("makelog"),
            "journal": sections.words("journal"),
        }
