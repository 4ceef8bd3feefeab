"""One batched fact for everything preflight reads off a host: OS, CPU, RAM, disk, PCI GPUs, Secure
Boot, loaded modules, kernel headers, NVIDIA/CUDA packages, holds, the dpkg lock and the boot id.

One remote command instead of a dozen keeps a re-run fast; each section is parsed on its own so a tool
that is missing (no lspci before pciutils, no mokutil on a BIOS box) is data, not a failed host.
"""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.packages import parse_packages
from vllm_rig.host.nvidia_smi import parse_driver_module
from vllm_rig.paths import DRIVER_RECORD

NVIDIA_PCI_VENDOR = "10de"
VGA_OR_3D = ("0300", "0302")

# Secure Boot without mokutil: efivarfs shows the variable (EFI_GLOBAL_VARIABLE's GUID) as 4 attribute
# bytes, then 1 data byte (1 = on).
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

# The key dkms signs modules with, where framework.conf names none: Ubuntu's dkms (also what NVIDIA's
# ubuntu2404 repo ships) uses shim-signed's MOK; upstream's and Debian's make their own pair.
DKMS_SIGNING_DEFAULTS = {
    "ubuntu": ("/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der"),
    "debian": ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"),
}


def _mok_shell() -> str:
    """The signing key and certificate dkms uses (framework.conf[.d] override the distribution's default),
    and what `mokutil --test-key` says of the certificate. In a subshell: os-release sets variables."""
    ubuntu_key, ubuntu_cert = DKMS_SIGNING_DEFAULTS["ubuntu"]
    debian_key, debian_cert = DKMS_SIGNING_DEFAULTS["debian"]
    return (
        "( . /etc/os-release 2>/dev/null; "
        f'case "$ID" in ubuntu) k={ubuntu_key}; c={ubuntu_cert};; *) k={debian_key}; c={debian_cert};; esac; '
        'for f in /etc/dkms/framework.conf /etc/dkms/framework.conf.d/*.conf; do [ -f "$f" ] || continue; '
        'v=$(sed -n \'s/^[[:space:]]*mok_signing_key=//p\' "$f" | tail -1 | tr -d "\\"\'"); '
        '[ -n "$v" ] && k=$v; '
        'v=$(sed -n \'s/^[[:space:]]*mok_certificate=//p\' "$f" | tail -1 | tr -d "\\"\'"); '
        '[ -n "$v" ] && c=$v; done; '
        'echo "key=$k"; echo "cert=$c"; [ -e "$k" ] && echo key_present; '
        "command -v mokutil >/dev/null 2>&1 || echo no_mokutil; "
        'if [ -e "$c" ]; then mokutil --test-key "$c" 2>&1; echo "rc=$?"; else echo cert_missing; fi )'
    )


# Shell for each section; stderr is folded in so "command not found" reaches the parser.
SECTIONS: dict[str, str] = {
    "os": "cat /etc/os-release",
    "kernel": "uname -r",
    "proc_version": "cat /proc/version",
    "arch": "uname -m",
    "cpus": "nproc",
    "meminfo": "head -1 /proc/meminfo",
    "lspci": "lspci -D -mm -n -d 10de: 2>&1 || echo rc=$?",
    "secureboot": "mokutil --sb-state 2>&1 || echo rc=$?",
    "efi": (
        f"if [ -d /sys/firmware/efi ]; then od -An -tu1 {SECURE_BOOT_VAR} 2>/dev/null || echo novar; "
        "else echo noefi; fi"
    ),
    "mok": _mok_shell(),
    # BAR1 is the second memory Region of each NVIDIA function; lspci reads the PCI config space, no driver needed.
    "lspci_vv": "lspci -D -vv -d 10de: 2>&1 | grep -E '^[0-9a-f]{4}:|Region [0-9]: Memory|not found' || true",
    # apt sources naming NVIDIA's CUDA repository (comment lines left out).
    "cuda_sources": (
        "grep -sH -E '^[^#]*/cuda/repos/' /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
        "/etc/apt/sources.list.d/*.sources || true"
    ),
    # /sys/module/<name> exists for every loaded module (and is there even where /proc/modules is not).
    "modules": "cd /sys/module 2>/dev/null && ls -d nvidia nvidia_* nouveau 2>/dev/null || true",
    "driver_loaded": "cat /proc/driver/nvidia/version 2>/dev/null || true",
    "headers": 'test -e "/lib/modules/$(uname -r)/build" && echo present || echo missing',
    "packages": (
        "dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'cuda-*' 'libcuda1' 'linux-headers-*' 'linux-image-*' 'linux-modules-nvidia-*' "
        "2>/dev/null || true"
    ),
    "dpkg_lock": "fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock 2>/dev/null || true",
    "nouveau_blacklist": "cat /etc/modprobe.d/*nouveau* 2>/dev/null | grep -E '^blacklist nouveau' || true",
    "boot_id": "cat /proc/sys/kernel/random/boot_id",
    "rig_driver": f"cat {DRIVER_RECORD} 2>/dev/null || true",
    "gpu_groups": "getent group video render | cut -d: -f1",
}


class OsRelease(TypedDict):
    id: str
    version_id: str
    pretty: str


class PciGpus(TypedDict):
    available: bool  # lspci is installed
    devices: list[dict[str, str]]  # {"slot", "class", "device_id"} of each NVIDIA display controller


class Mok(TypedDict):
    key: str | None  # dkms's signing key
    cert: str | None
    key_present: bool
    state: str  # "enrolled", "pending", "not_enrolled", "missing" (no certificate) or "unknown"
    detail: str  # what mokutil said


class SecureBoot(TypedDict):
    secure_boot: bool | None  # None: nobody could tell
    secure_boot_source: str | None


class Host(SecureBoot):
    os: OsRelease
    kernel: str
    proc_version: str
    arch: str | None
    cpus: int
    ram_gb: float
    disk_free_gb: float
    pci_gpus: PciGpus
    mok: Mok
    pci_bar1_mib: dict[str, int] | None  # {slot: BAR1 MiB}; None without lspci
    cuda_sources: list[dict[str, str]]
    modules: list[str]
    driver_loaded: str | None  # the loaded module's version
    driver_flavour: str | None  # "open" or "proprietary"
    headers: bool
    packages: dict[str, str]
    holds: list[str]
    dpkg_locked: bool
    nouveau_blacklisted: bool
    boot_id: str | None
    rig_driver: str | None
    gpu_groups: list[str]


class HostState(SectionFact[Host | None]):
    """Everything preflight needs, in one command. `path` is where the build and model go: the disk
    check reads its nearest existing parent."""

    # None: no output at all (the command did not run); preflight says it could not read the host
    DEFAULT: Host | None = None

    def command(self, path: str = "/") -> str:
        disk = f'p={shlex.quote(path)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -P -B1 "$p"'
        return section_command({**SECTIONS, "disk": disk})

    def parse(self, sections: Sections) -> Host | None:
        lines = sections.lines
        module = parse_driver_module(lines("driver_loaded"))
        return {
            "os": parse_os_release(lines("os")),
            "kernel": sections.required("kernel"),
            "proc_version": sections.first("proc_version") or "",
            "arch": sections.first("arch"),
            "cpus": sections.integer("cpus", default=0),
            "ram_gb": parse_meminfo_gb(lines("meminfo")),
            "disk_free_gb": parse_df_free_gb(lines("disk")),
            "pci_gpus": parse_lspci(lines("lspci")),
            **secure_boot_state(lines("secureboot"), lines("efi")),
            "mok": parse_mok(lines("mok")),
            "pci_bar1_mib": parse_lspci_bar1(lines("lspci_vv")),
            "cuda_sources": parse_cuda_sources(lines("cuda_sources")),
            "modules": parse_modules(lines("modules")),
            "driver_loaded": module.version,
            "driver_flavour": module.flavour,  # "open" or "proprietary", of the loaded module
            "headers": sections.first("headers") == "present",
            "packages": parse_packages(lines("packages")),
            "holds": parse_holds(lines("packages")),
            "dpkg_locked": bool(" ".join(lines("dpkg_lock")).strip()),
            "nouveau_blacklisted": bool(lines("nouveau_blacklist")),
            "boot_id": sections.first("boot_id"),
            "rig_driver": sections.first("rig_driver"),
            "gpu_groups": sorted(line.strip() for line in lines("gpu_groups") if line.strip()),
        }


def parse_os_release(lines: list[str]) -> OsRelease:
    out = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return {"id": out.get("ID", ""), "version_id": out.get("VERSION_ID", ""), "pretty": out.get("PRETTY_NAME", "")}


def parse_meminfo_gb(lines: list[str]) -> float:
    match = re.search(r"MemTotal:\s+(\d+) kB", " ".join(lines))
    return round(int(match.group(1)) / 1024 / 1024, 1) if match else 0.0


def parse_df_free_gb(lines: list[str]) -> float:
    """`df -P -B1 PATH`: the 4th column of the data line is the bytes available."""
    rows = [line.split() for line in lines[1:] if line.strip()]
    if rows and (len(rows[-1]) < 4 or not rows[-1][3].isdigit()):
        Sections.unreadable("df's available bytes", lines[-1].strip())
    return round(int(rows[-1][3]) / 1e9, 1) if rows else 0.0


# One field of `lspci -mm`: pciutils' lspci.c print_shell_escaped puts a field in double quotes and puts a
# backslash before '"' and '\\' only. An apostrophe is text, in a name or in a warning lspci or pcilib
# writes to stderr (2>&1), not shell quoting (shlex stopped the host on one outside quotes).
LSPCI_MM_FIELD = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def _lspci_fields(line: str) -> list[str]:
    """The fields of one line: a bare word as it is, a quoted one without its quotes and escapes."""
    return [bare or re.sub(r"\\(.)", r"\1", quoted) for quoted, bare in LSPCI_MM_FIELD.findall(line)]


def parse_lspci(lines: list[str]) -> PciGpus:
    """`lspci -D -mm -n -d 10de:`: NVIDIA display controllers (audio/USB functions skipped)."""
    if any("not found" in line for line in lines):
        return {"available": False, "devices": []}
    devices = []
    for line in lines:
        fields = _lspci_fields(line) if not line.startswith("rc=") else []
        if len(fields) >= 4 and fields[2] == NVIDIA_PCI_VENDOR and fields[1] in VGA_OR_3D:
            devices.append({"slot": fields[0], "class": fields[1], "device_id": fields[3]})
    return {"available": True, "devices": devices}


# mokutil --sb-state's second line when shim's MokSBState is set (`mokutil --disable-validation`): the
# firmware's Secure Boot is on, but shim does not validate what it boots and tells the kernel so
# (MokSBStateRT), so the kernel enforces no module signatures and a DKMS module loads without a MOK.
SHIM_NOT_VALIDATING = "SecureBoot validation is disabled in shim"


def parse_secure_boot(lines: list[str]) -> bool | None:
    """True/False from `mokutil --sb-state`; None when it cannot tell (no mokutil, no EFI). On with shim's
    validation off reads False: nothing checks a module's signature."""
    text = " ".join(lines)
    if SHIM_NOT_VALIDATING.lower() in text.lower():
        return False
    if "SecureBoot enabled" in text:
        return True
    if "SecureBoot disabled" in text:
        return False
    return None


def parse_efi_secure_boot(lines: list[str]) -> bool | None:
    """The SecureBoot EFI variable as `od -An -tu1` prints it (4 attribute bytes, then the value); False
    on a legacy BIOS boot (no /sys/firmware/efi); None when the variable cannot be read."""
    text = " ".join(lines).split()
    if text == ["noefi"]:
        return False
    if len(text) >= 5 and all(word.isdigit() for word in text):
        return int(text[4]) == 1
    return None


def secure_boot_state(mokutil_lines: list[str], efi_lines: list[str]) -> SecureBoot:
    """Secure Boot on or off and who said so: mokutil, else the EFI variable (so a box without mokutil
    is never read as "not reported")."""
    state = parse_secure_boot(mokutil_lines)
    if state is not None:
        said = " ".join(mokutil_lines).lower()
        source = f"mokutil --sb-state: {SHIM_NOT_VALIDATING}" if SHIM_NOT_VALIDATING.lower() in said else None
        return {"secure_boot": state, "secure_boot_source": source or "mokutil --sb-state"}
    state = parse_efi_secure_boot(efi_lines)
    if state is None:
        return {"secure_boot": None, "secure_boot_source": None}
    source = "no EFI: legacy boot" if " ".join(efi_lines).split() == ["noefi"] else "the SecureBoot EFI variable"
    return {"secure_boot": state, "secure_boot_source": source}


def parse_mok(lines: list[str]) -> Mok:
    """dkms's signing key and certificate and whether the firmware has the certificate, from
    `mokutil --test-key CERT` (lcp/mokutil: "is not enrolled" exits 0; "is already enrolled", "is already
    in db" and "is already in the enrollment request" exit 1)."""
    fields = dict(line.split("=", 1) for line in lines if line.startswith(("key=", "cert=")))
    text = " ".join(line.strip() for line in lines if not line.startswith(("key=", "cert=", "rc=")))
    if "no_mokutil" in lines:
        state, text = "unknown", "mokutil is not installed"
    elif "cert_missing" in lines:
        state = "missing"
    elif "in the enrollment request" in text:
        state = "pending"
    elif "is already enrolled" in text or "is already in db" in text:
        state = "enrolled"
    elif "is not enrolled" in text:
        state = "not_enrolled"
    else:
        state = "unknown"  # no mokutil, or no EFI variables to read
    detail = " ".join(
        w for w in text.replace("key_present", "").replace("cert_missing", "").split() if w != "no_mokutil"
    )
    return {
        "key": fields.get("key", "").strip() or None,
        "cert": fields.get("cert", "").strip() or None,
        "key_present": "key_present" in lines,
        "state": state,
        "detail": detail,
    }


# A memory BAR line of `lspci -vv`. BAR1 (the aperture the open modules need as large as the memory) is the
# function's second memory region: "Region 1" where BAR0 is 32-bit (a 2080 Ti: Regions 0, 1, 3), "Region 2"
# where BAR0 is 64-bit and takes two slots (an H200: Regions 0, 2, 4; tests/unit/fixtures/tool_outputs/h200).
_REGION_SIZE = re.compile(r"Region (\d): Memory at .*\[size=(\d+)([KMGT]?)\]")
_SLOT = re.compile(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_lspci_bar1(lines: list[str]) -> dict[str, int] | None:
    """{slot: BAR1 MiB} of each NVIDIA display controller, from `lspci -D -vv -d 10de:` (its memory Region
    lines: BAR1 is the second one); None when lspci is not installed."""
    if any("not found" in line for line in lines):
        return None
    regions: dict[str, list[int]] = {}
    slot = None
    for line in lines:
        head = _SLOT.match(line)
        if head:
            kind = line[head.end() :]
            slot = head.group(1) if kind.startswith(("VGA compatible controller", "3D controller")) else None
            if slot:
                regions[slot] = []
            continue
        match = _REGION_SIZE.search(line)
        if slot and match:
            regions[slot].append(int(match.group(2)) * _UNITS[match.group(3)] // (1 << 20))
    return {slot: sizes[1] for slot, sizes in regions.items() if len(sizes) > 1}


# The file NVIDIA's keyring package installs: cuda-<distro>-x86_64.list (e.g. cuda-ubuntu2404-x86_64.list).
KEYRING_LIST = re.compile(r"/cuda-[a-z]+\d+-x86_64\.list$")


def parse_cuda_sources(lines: list[str]) -> list[dict[str, str]]:
    """apt sources other than the keyring package's own file that name NVIDIA's CUDA repository."""
    found: dict[str, str] = {}
    for line in lines:
        path, sep, entry = line.partition(":")
        if sep and not KEYRING_LIST.search(path) and path not in found:
            found[path] = entry.strip()
    return [{"file": path, "entry": entry} for path, entry in found.items()]


def parse_modules(lines: list[str]) -> list[str]:
    """Module names, one per line (`ls` of /sys/module) or as the first word (/proc/modules)."""
    return sorted({line.split()[0] for line in lines if line.strip()})


def parse_holds(lines: list[str]) -> list[str]:
    """Held packages, from the same dpkg-query status: its first letter is the selection ("h" = hold).
    Equivalent to `apt-mark showhold` for these packages, without a second, slower program."""
    held = []
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 3 and parts[2].strip()[:1] == "h":
            held.append(parts[0])
    return sorted(held)
