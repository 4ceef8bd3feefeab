"""The links between GPUs through NVML, NVIDIA's documented C interface (nvml.h), called with ctypes.

What nvidia-smi's XML lacks (no topology matrix, no P2P grant, no NVLink link states in its DTD) is asked of
libnvidia-ml.so.1, which the driver installs beside nvidia-smi. Standard library only, like the rest of the
tier that runs on a fresh box: nvidia-ml-py is itself a ctypes binding, and these few calls need no more.

Names and values are nvml.h's (CUDA 12.6's cuda-nvml-dev, 12.6.77; nvidia-ml-py's pynvml.py has the same
numbers). The words are nvidia-smi's, so the rules (gpu_rules.py) read one vocabulary: a pair joined by N
active NVLinks is "NV<N>", else the common PCIe ancestor (PIX, PXB, PHB, NODE, SYS); the P2P grant is "OK"
when NVML grants both read and write, else the reason (CNS, GNS, TNS, NS, U).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LIBRARY = "libnvidia-ml.so.1"
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 2, 3
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
FEATURE_ENABLED = 1  # nvmlEnableState_t
P2P_READ, P2P_WRITE = 0, 1  # nvmlGpuP2PCapsIndex_t
FI_NVLINK_SPEED_MBPS_COMMON = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: common speed of the active links
VALUE_UNSIGNED_INT = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
TOPOLOGY = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}  # nvmlGpuTopologyLevel_t
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "REGKEY", 5: "NS", 6: "U"}  # nvmlGpuP2PStatus_t
# Every function this module calls: the sandbox's libnvidia-ml stand-in must export each (a unit test asks).
FUNCTIONS = (
    "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetFieldValues",
)  # fmt: skip


class PciInfo(ctypes.Structure):  # nvmlPciInfo_t
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        *((name, ctypes.c_uint) for name in ("domain", "bus", "device", "pciDeviceId", "pciSubSystemId")),
        ("busId", ctypes.c_char * 32),
    ]


class FieldValue(ctypes.Structure):  # nvmlFieldValue_t; its nvmlValue_t, 8 bytes: uiVal is the low half on x86-64
    _fields_ = [
        ("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
        ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
        ("value", ctypes.c_ulonglong),
    ]  # fmt: skip


@dataclass(frozen=True)
class Links:
    """The links between GPUs, in the words gpu_rules reads: topo[a][b] ("NV2", "PHB"), p2p[a][b] ("OK",
    "CNS") for GPU names "GPU0".., NVLink GB/s per GPU and link (None: not up), the links not up ("GPU1
    link 2"; "GPU0 all links" when a GPU has links and none is up); error: NVML could not be asked, and why
    (the version mismatch after an upgrade is NVML's own return code, NVML_ERROR_LIB_RM_VERSION_MISMATCH)."""

    topo: dict[str, dict[str, str]] = field(default_factory=dict)
    p2p: dict[str, dict[str, str]] = field(default_factory=dict)
    nvlink: dict[int, list[float | None]] = field(default_factory=dict)
    nvlink_down: list[str] = field(default_factory=list)
    error: str | None = None


class NvmlError(Exception):
    pass


class Nvml:
    """The loaded library; `call` raises NvmlError for any return code but those the caller accepts."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def get(self, function: str, *args: object, kind: type = ctypes.c_int, accept: tuple[int, ...] = ()) -> Any:
        """What `function` writes to its last argument (a ctypes value or struct); None where it answered one
        of the return codes in `accept`."""
        out = kind()
        return out if self.call(function, *args, ctypes.byref(out), accept=accept) == SUCCESS else None

    def call(self, function: str, *args: object, accept: tuple[int, ...] = ()) -> int:
        rc = int(getattr(self.lib, function)(*args))
        if rc != SUCCESS and rc not in accept:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            text = (self.lib.nvmlErrorString(rc) or b"unknown error").decode(errors="replace")
            raise NvmlError(f"NVML {function}: {text} (return code {rc})")
        return rc


def read_links(load: Callable[[str], ctypes.CDLL] = ctypes.CDLL) -> Links:
    """Ask NVML here. Never raises: a missing library, a failed call or a function the library lacks (an
    older driver's) is `error`."""
    try:
        nvml = Nvml(load(LIBRARY))
    except OSError:
        return Links(error=f"{LIBRARY} not found: no NVIDIA driver installed")
    try:
        nvml.call("nvmlInit_v2")
        try:
            return _links(nvml)
        finally:
            nvml.lib.nvmlShutdown()  # its answer changes nothing here
    except NvmlError as err:
        return Links(error=str(err))
    except AttributeError as err:
        return Links(error=f"{LIBRARY} lacks a function NVML documents: {err}")


def _links(nvml: Nvml) -> Links:
    count = nvml.get("nvmlDeviceGetCount_v2", kind=ctypes.c_uint).value
    handles = [nvml.get("nvmlDeviceGetHandleByIndex_v2", i, kind=ctypes.c_void_p) for i in range(count)]
    bus_ids = [_bus_id(nvml.get("nvmlDeviceGetPciInfo_v3", h, kind=PciInfo)) for h in handles]
    peers = [_nvlinks(nvml, h) for h in handles]  # per GPU: [(link, remote bus id or None when not up)]
    speeds = [_speed(nvml, h) for h in handles]
    links = Links()
    for a, handle in enumerate(handles):
        present = peers[a]
        links.nvlink[a] = [None if remote is None else speeds[a] for _, remote in present]
        if present and all(remote is None for _, remote in present):
            links.nvlink_down.append(f"GPU{a} all links")
        else:
            links.nvlink_down.extend(f"GPU{a} link {n}" for n, remote in present if remote is None)
        for b, other in enumerate(handles):
            if a != b:
                joined = sum(1 for _, remote in present if remote == bus_ids[b])
                level = joined or nvml.get("nvmlDeviceGetTopologyCommonAncestor", handle, other).value
                links.topo.setdefault(f"GPU{a}", {})[f"GPU{b}"] = f"NV{joined}" if joined else TOPOLOGY.get(level, "?")
                links.p2p.setdefault(f"GPU{a}", {})[f"GPU{b}"] = _grant(nvml, handle, other)
    return links


def _bus_id(pci: PciInfo) -> str:
    return pci.busId.decode(errors="replace").upper()


def _nvlinks(nvml: Nvml, handle: ctypes.c_void_p) -> list[tuple[int, str | None]]:
    """Each NVLink the GPU has: its number and, when up, the PCI bus id of the other end. A link number the GPU
    lacks answers NOT_SUPPORTED or INVALID_ARGUMENT (a GPU without NVLink: every one)."""
    found: list[tuple[int, str | None]] = []
    for link in range(MAX_LINKS):
        state = nvml.get("nvmlDeviceGetNvLinkState", handle, link, accept=(NOT_SUPPORTED, INVALID_ARGUMENT))
        if state is not None:
            up = state.value == FEATURE_ENABLED
            remote = nvml.get("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, link, kind=PciInfo) if up else None
            found.append((link, remote and _bus_id(remote)))
    return found


def _speed(nvml: Nvml, handle: ctypes.c_void_p) -> float | None:
    """GB/s of the GPU's active links (NVML says MBps; nvidia-smi nvlink -s prints it /1000), None if not said."""
    value = FieldValue(fieldId=FI_NVLINK_SPEED_MBPS_COMMON)
    rc = nvml.call("nvmlDeviceGetFieldValues", handle, 1, ctypes.byref(value), accept=(NOT_SUPPORTED,))
    speed = value.value & 0xFFFFFFFF
    if rc != SUCCESS or value.nvmlReturn != SUCCESS or value.valueType != VALUE_UNSIGNED_INT or not speed:
        return None
    return speed / 1000


def _grant(nvml: Nvml, a: ctypes.c_void_p, b: ctypes.c_void_p) -> str:
    """nvidia-smi topo -p2p rw's word: OK when both read and write are granted, else the first refusal."""
    for index in (P2P_READ, P2P_WRITE):
        if status := nvml.get("nvmlDeviceGetP2PStatus", a, b, index).value:
            return P2P_STATUS.get(status, "U")
    return "OK"
