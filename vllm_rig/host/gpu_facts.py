#!/usr/bin/env python3
"""The one reader of the GPUs: `nvidia-smi -q -x`, the XML NVIDIA documents with a DTD (nvsmi_device_v12.dtd on
the 535-570 drivers, v13 on 580; `nvidia-smi --dtd` prints it), not the human-readable text, which NVIDIA does
not promise to keep stable. Standard library only: preflight and the status probe run it on a fresh or broken
box, and the verdict and the GPU wait on one whose venv may be what is broken; NVML's Python binding would need
a venv. The control side's facts import it as `vllm_rig.host.gpu_facts` and parse what the host printed.

    python3 vllm-rig-host.pyz gpu_facts     # one JSON object: GpuFacts, and `links` (nvml.Links)

What the XML lacks: the topology between GPUs, the driver's P2P grant and the NVLink link states (no matrix in
the DTD), read through NVML itself (nvml.py); and the compute capability (the DTD has the architecture, which
names it for every architecture but Ampere, 8.0 or 8.6).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, fields

from . import nvml
from .nvidia_smi import SmiError, parse_error

COMMAND = ("nvidia-smi", "-q", "-x")
NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?")
# The architecture the XML names (nvml.h's NVML_DEVICE_ARCH_*, as nvidia-smi spells it) -> the compute
# capability it fixes (NVIDIA's CUDA GPUs table). Ampere is 8.0 (A100) or 8.6 (GeForce 30): not said here.
ARCH_CAPABILITY = {"Volta": "7.0", "Turing": "7.5", "Ada Lovelace": "8.9", "Hopper": "9.0"}
CAPABILITY_ARCH = {**{cc: arch for arch, cc in ARCH_CAPABILITY.items()}, "8.0": "Ampere", "8.6": "Ampere"}


@dataclass(frozen=True)
class Process:
    """One <process_info>: type C (compute), G (graphics: an Xorg, a desktop shell) or C+G; used_mib None
    where the XML says N/A."""

    pid: int
    kind: str
    name: str
    used_mib: int | None

    @property
    def graphics_only(self) -> bool:
        return self.kind == "G"


@dataclass(frozen=True)
class Gpu:
    """One <gpu>; index is its place in the XML, nvidia-smi's index. None: the XML says N/A (a riser's link
    width, a GB10's memory) or lacks the element."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    architecture: str | None = None
    compute_cap: str | None = None
    memory_mib: int | None = None
    memory_used_mib: int | None = None
    bar1_mib: int | None = None
    persistence: bool | None = None
    power_limit_w: float | None = None
    power_default_w: float | None = None
    power_min_w: float | None = None
    power_max_w: float | None = None
    power_draw_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    processes: tuple[Process, ...] = ()


@dataclass(frozen=True)
class GpuFacts:
    """What nvidia-smi said: the GPUs, or `error` (it failed: no driver, the NVML mismatch) or `problem` (its
    answer was not the XML)."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    error: SmiError | None = None
    problem: str | None = None

    @property
    def why_not(self) -> str | None:
        """One line on why there are no facts, else None."""
        return self.error.message if self.error else self.problem


def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    text = (found.text or "").strip() if found is not None else ""
    return text if text and not text.startswith(("N/A", "[N/A]", "Unknown", "Not ", "Requested")) else None


def _number(node: ET.Element | None, path: str) -> float | None:
    """ "81559 MiB", "700.00 W", "16x", "39 C" -> the number; None for N/A."""
    match = NUMBER.match(_text(node, path) or "")
    return float(match.group()) if match else None


def _int(node: ET.Element | None, path: str) -> int | None:
    value = _number(node, path)
    return None if value is None else int(value)


def _either(new: float | None, old: float | None) -> float | None:
    """The v13 element, else the one older DTDs name (power_limit, power_draw)."""
    return old if new is None else new


def _process(node: ET.Element) -> Process | None:
    pid = _int(node, "pid")
    if pid is None:
        return None
    return Process(pid, _text(node, "type") or "C", _text(node, "process_name") or "?", _int(node, "used_memory"))


def _gpu(index: int, node: ET.Element) -> Gpu:
    # gpu_power_readings since the v12 DTD (535); power_readings before it.
    power = node.find("gpu_power_readings")
    power = power if power is not None else node.find("power_readings")
    persistence = _text(node, "persistence_mode")
    architecture = _text(node, "product_architecture")
    return Gpu(
        index=index,
        name=_text(node, "product_name"),
        uuid=_text(node, "uuid"),
        bus_id=_text(node, "pci/pci_bus_id") or node.get("id"),
        architecture=architecture,
        compute_cap=ARCH_CAPABILITY.get(architecture or ""),
        memory_mib=_int(node, "fb_memory_usage/total"),
        memory_used_mib=_int(node, "fb_memory_usage/used"),
        bar1_mib=_int(node, "bar1_memory_usage/total"),
        persistence={"Enabled": True, "Disabled": False}.get(persistence or ""),
        power_limit_w=_either(_number(power, "current_power_limit"), _number(power, "power_limit")),
        power_default_w=_number(power, "default_power_limit"),
        power_min_w=_number(power, "min_power_limit"),
        power_max_w=_number(power, "max_power_limit"),
        power_draw_w=_either(_number(power, "instant_power_draw"), _number(power, "power_draw")),
        temperature_c=_number(node, "temperature/gpu_temp"),
        sm_clock_mhz=_int(node, "clocks/sm_clock"),
        sm_clock_max_mhz=_int(node, "max_clocks/sm_clock"),
        pcie_gen=_int(node, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        pcie_width=_int(node, "pci/pci_gpu_link_info/link_widths/current_link_width"),
        pcie_width_max=_int(node, "pci/pci_gpu_link_info/link_widths/max_link_width"),
        processes=tuple(p for p in map(_process, node.findall("processes/process_info")) if p),
    )


def parse(text: str, rc: int = 0) -> GpuFacts:
    """What `nvidia-smi -q -x` printed (stdout and stderr) and its exit code. Never raises."""
    if rc != 0:
        return GpuFacts(error=parse_error(text.splitlines(), rc))
    # The text crossed from the host: an entity declaration is how XML blows up its parser (nvidia-smi's
    # DTD is referenced, never inline, and ElementTree does not fetch it).
    if "<!ENTITY" in text:
        return GpuFacts(problem="nvidia-smi -q -x: refused, its XML declares entities")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "nothing")
        return GpuFacts(problem=f"nvidia-smi -q -x did not print its XML ({err}): {first[:120]}")
    if root.tag != "nvidia_smi_log":
        return GpuFacts(problem=f"nvidia-smi -q -x: <{root.tag}> is not <nvidia_smi_log>")
    gpus = tuple(_gpu(i, node) for i, node in enumerate(root.findall("gpu")))
    return GpuFacts(_text(root, "driver_version"), _text(root, "cuda_version"), gpus)


def read(timeout: float = 60.0) -> GpuFacts:
    """Run `nvidia-smi -q -x` here."""
    try:
        run = subprocess.run(COMMAND, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return GpuFacts(error=SmiError("nvidia-smi not found: no NVIDIA driver installed, or not on PATH", 127))
    except subprocess.TimeoutExpired:
        return GpuFacts(error=SmiError(f"nvidia-smi -q -x gave no answer in {timeout:.0f} s", 124))
    return parse(run.stdout if run.returncode == 0 else run.stdout + run.stderr, run.returncode)


SCALARS = (str, int, float, bool, type(None))


def from_record(lines: list[str]) -> tuple[GpuFacts, nvml.Links | None]:
    """`main`'s record read back on the control side (its last JSON line), the links None where the reader did
    not ask NVML. What is not such a record is `problem`, quoting the end of what the host printed."""
    try:
        data = next(d for line in reversed(lines) if line.startswith("{") and isinstance(d := json.loads(line), dict))
        names = {f.name for f in fields(Gpu)} - {"processes"}
        gpus = tuple(Gpu(**{k: v for k, v in gpu.items() if k in names}) for gpu in data["gpus"])
        if any(not isinstance(v, SCALARS) for gpu in gpus for v in asdict(gpu).values() if v != ()):
            raise ValueError("a GPU field that is not a number or a word")
        error = SmiError(**data["error"]) if data["error"] else None
        facts = GpuFacts(data["driver_version"], data["cuda_version"], gpus, error, data["problem"])
        links = data.get("links")
        if links is None:
            return facts, None
        known = {f.name for f in fields(nvml.Links)}  # a key another version of the reader adds is left out
        links = {k: v for k, v in links.items() if k in known}
        return facts, nvml.Links(**{**links, "nvlink": {int(k): v for k, v in links["nvlink"].items()}})
    except (StopIteration, ValueError, TypeError, KeyError, AttributeError) as err:
        said = " | ".join(line.strip() for line in lines[-3:] if line.strip()) or "nothing"
        why = err or type(err).__name__
        return GpuFacts(problem=f"the GPU reader's answer was not understood ({why}): {said}"), None


def record() -> dict:
    """The GPUs (the XML) and, when nvidia-smi answered, the links between them (NVML): one JSON object."""
    facts = read()
    return {**asdict(facts), "links": asdict(nvml.read_links()) if facts.why_not is None else None}


def main(argv: list[str] | None = None) -> int:
    description = "nvidia-smi -q -x and NVML's links as one JSON object (exit 1: no facts, and why)"
    argparse.ArgumentParser(description=description).parse_args(argv)
    data = record()
    print(json.dumps(data))
    return 0 if data["error"] is None and data["problem"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
