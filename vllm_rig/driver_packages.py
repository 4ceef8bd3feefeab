"""Which packages make up a pinned NVIDIA driver, per distribution and kernel-module flavour.

Names follow NVIDIA's CUDA apt repository (shared/notes/nvidia-apt-notes.md): Ubuntu carries the branch in
the name (580 is the last branch named so), Debian does not. Compute-only sets (no X server), plus
nvidia-smi, the persistence daemon and DKMS so every future kernel gets a module.
"""

from __future__ import annotations

from dataclasses import dataclass

# Packages whose versions must move together; held after install so only a planned upgrade moves them.
HOLD_PATTERNS = ("nvidia-*", "libnvidia-*", "libcuda1", "firmware-nvidia-gsp", "cuda-drivers*")


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


def driver_set(distro: str, flavor: str, version: str, kernel: str) -> DriverSet:
    branch = version.split(".")[0]
    open_ = flavor == "open"
    pinning = f"nvidia-driver-pinning-{version}"
    if distro.startswith("ubuntu"):
        dkms = f"nvidia-dkms-{branch}-open" if open_ else f"nvidia-dkms-{branch}"
        packages = (f"libnvidia-compute-{branch}", dkms, f"nvidia-utils-{branch}", f"nvidia-compute-utils-{branch}")
        return DriverSet(
            distro, pinning, packages, (f"linux-headers-{kernel}", "linux-headers-generic"), f"nvidia-utils-{branch}"
        )
    dkms = "nvidia-kernel-open-dkms" if open_ else "nvidia-kernel-dkms"
    packages = ("nvidia-driver-cuda", dkms, "nvidia-smi", "nvidia-persistenced")
    return DriverSet(distro, pinning, packages, (f"linux-headers-{kernel}", "linux-headers-amd64"), "nvidia-smi")
