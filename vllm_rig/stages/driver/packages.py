"""Which packages make up a pinned NVIDIA driver, per distribution and kernel-module flavour.

Names follow the Packages index of NVIDIA's CUDA apt repository (`nvidia_repo_url`, ubuntu2404/x86_64 and
debian12/x86_64): Ubuntu carries the branch in the name (libnvidia-compute-580, nvidia-dkms-580), Debian
does not (nvidia-driver-cuda, nvidia-kernel-dkms). 580 is the last branch named so: from 590 the names drop
it (NVIDIA Driver Installation Guide, Recent Updates, "Ubuntu 590 and later packages":
https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/recent-updates.html). Compute-only sets
(no X server), plus nvidia-smi, the persistence daemon and DKMS so every future kernel gets a module.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

# Packages whose versions must move together; held after install so only a planned upgrade moves them.
HOLD_PATTERNS = ("nvidia-*", "libnvidia-*", "libcuda1", "firmware-nvidia-gsp", "cuda-drivers*")

# Canonical's signed, prebuilt modules (linux-restricted-modules): linux-modules-nvidia-580-generic[-hwe-24.04]
# and the per-kernel linux-modules-nvidia-580-<kver>, which need the archive's userspace at >= their version.
ARCHIVE_MODULES = "linux-modules-nvidia-*"
# A kept archive driver is held together with the kernel track: a kernel that lands without its
# linux-modules-nvidia-* (held) would boot with no nvidia module at all.
ARCHIVE_HOLD_PATTERNS = (
    *HOLD_PATTERNS,
    ARCHIVE_MODULES,
    "linux-generic*",
    "linux-image-generic*",
    "linux-headers-generic*",
)
# Ubuntu's archive revisions (580.173.02-0ubuntu0.24.04.1); NVIDIA's repo builds say -1ubuntu1.
_ARCHIVE_REVISION = re.compile(r"-0ubuntu\d")


def archive_driver(packages: dict[str, str]) -> str | None:
    """The upstream version of a driver that came from Ubuntu's archive (its nvidia-utils-<branch> carries an
    archive revision, or Canonical's signed modules are installed), else None."""
    utils = sorted(n for n in packages if re.fullmatch(r"nvidia-utils-\d+(-server)?", n))
    from_archive = [n for n in utils if _ARCHIVE_REVISION.search(packages[n])]
    if not from_archive and not archive_modules(packages):
        return None
    names = from_archive or utils
    return packages[names[0]].split("-", 1)[0] if names else None


def archive_modules(packages: dict[str, str]) -> list[str]:
    """Canonical's signed precompiled module packages that are installed (linux-modules-nvidia-*)."""
    return sorted(n for n in packages if fnmatch.fnmatch(n, ARCHIVE_MODULES))


def archive_moves(packages: dict[str, str], driver: DriverSet, leaving: list[str]) -> list[str]:
    """Other archive builds of driver packages that stay installed (nvidia-modprobe, nvidia-kernel-common-580...):
    moved with the driver to the pinned version, so no archive build is left beside NVIDIA's."""
    return sorted(
        n
        for n, v in packages.items()
        if _ARCHIVE_REVISION.search(v)
        and n not in leaving
        and n not in driver.packages
        and any(fnmatch.fnmatch(n, p) for p in HOLD_PATTERNS)
    )


def archive_only(packages: dict[str, str], driver: DriverSet) -> list[str]:
    """What replacing an archive driver removes first: Canonical's modules (they need the archive's
    userspace and would shadow nothing but block the move) and archive metapackages outside our set."""
    names = [n for n in packages if fnmatch.fnmatch(n, ARCHIVE_MODULES)]
    names += [
        n
        for n, v in packages.items()
        if _ARCHIVE_REVISION.search(v)
        and re.fullmatch(r"nvidia-(driver|headless)(-no-dkms)?-\d+(-server)?(-open)?", n)
        and n not in driver.packages
    ]
    return sorted(names)


@dataclass(frozen=True)
class DriverSet:
    distro: str  # NVIDIA's repo path name: ubuntu2404, debian12
    pinning: str  # the version-locking package (NVIDIA's mechanism)
    packages: tuple[str, ...]  # what to install, resolved at the pinned version
    headers: tuple[str, ...]  # headers for the running kernel and for future kernels
    utils: str  # the package that carries nvidia-smi: its version is the installed driver's


def repo_distro(os_id: str, version_id: str) -> str:
    """NVIDIA's repo path for an OS: ubuntu 24.04 -> ubuntu2404, debian 12 -> debian12."""
    return f"{os_id}{version_id.replace('.', '')}"


# linux-image-<flavour>: the metapackage that keeps a kernel track (generic, generic-hwe-24.04, lowlatency,
# amd64, cloud-amd64...); versioned images start with a digit, and unsigned-/extra- ones are not tracks.
_IMAGE_META = re.compile(r"^linux-image-(?!unsigned-|extra-|uc-)([a-z][a-z0-9.+-]*)$")


def headers_metapackages(distro: str, installed: Iterable[str]) -> tuple[str, ...]:
    """The headers metapackage of every kernel track the box follows, from its installed kernel image
    metapackages: linux-image-generic-hwe-24.04 -> linux-headers-generic-hwe-24.04 (noble's GA
    linux-headers-generic would leave the next HWE kernel without headers, so without a module). None
    installed (a container, a hand-built kernel): the distribution's default track."""
    metas = sorted({f"linux-headers-{m.group(1)}" for name in installed if (m := _IMAGE_META.match(name))})
    return tuple(metas) or (("linux-headers-generic",) if distro.startswith("ubuntu") else ("linux-headers-amd64",))


def kernel_compiler_package(proc_version: str) -> str | None:
    """The versioned gcc the running kernel was built with, when /proc/version names one: noble's HWE
    kernels say x86_64-linux-gnu-gcc-14 while noble's default gcc is 13, and DKMS builds modules with the
    kernel's own compiler ("gcc-14: not found" otherwise). A plain "gcc (...)" needs nothing more."""
    match = re.search(r"\bgcc-(\d+)\b", proc_version)
    return f"gcc-{match.group(1)}" if match else None


def driver_set(distro: str, flavor: str, version: str, kernel: str, kernel_images: Iterable[str] = ()) -> DriverSet:
    """`kernel_images`: installed package names (the linux-image-* metapackages among them pick the headers)."""
    branch = version.split(".")[0]
    tracks = headers_metapackages(distro, kernel_images)
    open_ = flavor == "open"
    pinning = f"nvidia-driver-pinning-{version}"
    if distro.startswith("ubuntu"):
        dkms = f"nvidia-dkms-{branch}-open" if open_ else f"nvidia-dkms-{branch}"
        packages = (f"libnvidia-compute-{branch}", dkms, f"nvidia-utils-{branch}", f"nvidia-compute-utils-{branch}")
        return DriverSet(distro, pinning, packages, (f"linux-headers-{kernel}", *tracks), f"nvidia-utils-{branch}")
    dkms = "nvidia-kernel-open-dkms" if open_ else "nvidia-kernel-dkms"
    packages = ("nvidia-driver-cuda", dkms, "nvidia-smi", "nvidia-persistenced")
    return DriverSet(distro, pinning, packages, (f"linux-headers-{kernel}", *tracks), "nvidia-smi")
