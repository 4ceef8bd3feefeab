"""Driver state read at execute time, in one command: what dpkg has, what the kernel has loaded, holds,
nouveau, the boot id. Decides upgrades and reboots (`_if=` callables read it after earlier steps ran)."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections
from vllm_rig.core.packages import parse_packages
from vllm_rig.stages.preflight.facts import parse_holds

SECTIONS = {
    "packages": (
        "dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'libcuda1' 'cuda-*' 'dkms' 'linux-headers-*' "
        "'linux-modules-nvidia-*' 'linux-generic*' 'linux-image-generic*' 2>/dev/null || true"
    ),
    "loaded": "cat /sys/module/nvidia/version 2>/dev/null || true",
    "nouveau": "test -d /sys/module/nouveau && echo loaded || true",
    "boot_id": "cat /proc/sys/kernel/random/boot_id",
    "kernel": "uname -r",
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
            "kernel": next((x.strip() for x in raw.get("kernel", []) if x.strip()), None),
        }


# Kernel lines that say why nvidia.ko did not load or did not bring the GPUs up: module signature checks
# (kernel/module/signing.c), modprobe's EKEYREJECTED, the open modules' static BAR1 check.
# Anchored at the message's start (journalctl -o cat), so that sudo's own log line of this very command,
# which carries the pattern, never matches.
REFUSAL_PATTERN = (
    "^(Loading of .* is rejected|[a-z_-]+: ERROR: could not insert .*: Key was rejected by service|"
    "Failed to insert module .*: Key was rejected by service|[a-z_]+: module verification failed|"
    "NVRM: kbusIsStaticBar1Supported|NVRM: GPU .*RmInitAdapter failed)"
)


class ModuleFailure(FactBase):
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
                f"journalctl -b --no-pager -o cat 2>/dev/null | grep -E {shlex.quote(REFUSAL_PATTERN)} | tail -n 3"
            ),
        }
        body = "; ".join(f"echo @@{k}; {{ {v}; }}" for k, v in parts.items())
        return "sh -c " + shlex.quote(body + "; true")

    def process(self, output: list[str]) -> dict[str, Any]:
        raw = split_sections(output)
        clean = {k: [line.strip() for line in v if line.strip()] for k, v in raw.items()}
        module = (clean.get("module") or [""])[0]
        return {
            "kernel": (clean.get("kernel") or [None])[0],
            "module_file": module if module.startswith("/") else None,
            "dkms": clean.get("dkms", []),
            "make_log": clean.get("makelog", []),
            "journal": clean.get("journal", []),
        }
