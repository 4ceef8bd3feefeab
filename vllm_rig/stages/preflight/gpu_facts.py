"""The fact that reads the GPUs and the links between them: the host package's one GPU reader
(vllm_rig/host/gpu_facts.py: nvidia-smi's XML and NVML), run from the zip sent on stdin, as the model
preflight is (nothing is uploaded before preflight's verdict). Pass `_stdin=reader_stdin()`.

A failing nvidia-smi (no driver, the "Driver/library version mismatch" after an upgrade) or NVML is data in
the reader's record for the deploy to act on, not a failed host.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TypedDict, cast

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.host_package import run_from_stdin, stdin_text
from vllm_rig.core.secrets import SecretStdin
from vllm_rig.host import gpu_facts


class GpuInfo(TypedDict):
    """What preflight reads of one GPU (gpu_facts.Gpu's fields but its processes); None where the XML says N/A."""

    index: int
    name: str | None
    uuid: str | None
    bus_id: str | None
    architecture: str | None
    compute_cap: str | None
    memory_mib: int | None
    memory_used_mib: int | None
    bar1_mib: int | None
    persistence: bool | None
    power_limit_w: float | None
    power_default_w: float | None
    power_min_w: float | None
    power_max_w: float | None
    power_draw_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_width_max: int | None


class TopologyResult(TypedDict):
    """The links as NVML said them (vllm_rig/host/nvml.py Links): topology and P2P grant per pair, NVLink speeds
    per GPU and link, the links that are down; error: NVML could not be asked, and why."""

    error: str | None
    topo: dict[str, dict[str, str]]
    p2p: dict[str, dict[str, str]]
    nvlink: dict[int, list[float | None]]
    nvlink_down: list[str]


class GpusResult(TypedDict):
    """NvidiaGpus: nvidia-smi's exit status and error line, the NVML library's version where the error
    names it, why the reader's answer was not understood, the driver version, the GPUs and their links
    (None where nvidia-smi failed)."""

    rc: int
    error: str | None
    library_version: str | None
    problem: str | None
    driver_version: str | None
    gpus: list[GpuInfo]
    links: TopologyResult | None


def _gpu_info(gpu: gpu_facts.Gpu) -> GpuInfo:
    info = asdict(gpu)
    info.pop("processes")
    return cast(GpuInfo, info)  # GpuInfo names Gpu's fields but its processes


def reader_stdin() -> SecretStdin:
    """What NvidiaGpus's command reads: no secret line, then the host package."""
    return SecretStdin(stdin_text())


class NvidiaGpus(SectionFact[GpusResult | None]):
    """GPUs and links as the driver sees them; None when nvidia-smi is absent (or the host failed)."""

    @staticmethod
    def default() -> GpusResult | None:
        return None

    def command(self) -> str:
        return section_command({"gpus": run_from_stdin("gpu_facts", []) + " 2>&1"})

    def parse(self, sections: Sections) -> GpusResult | None:
        facts, links = gpu_facts.from_record(sections.lines("gpus"))
        error = facts.error
        if error and error.rc == 127:
            # No nvidia-smi: None, "not installed yet". The reader says so itself: pyinfra's requires_command
            # would skip the command without reading the host package on stdin, and the write would fail.
            return None
        return GpusResult(
            rc=error.rc if error else 0,
            error=error.message if error else None,
            # The NVML mismatch names the library's version ("NVML library version: 580.178"): preflight
            # puts it beside the loaded module's.
            library_version=error.library_version if error else None,
            problem=facts.problem,
            driver_version=facts.driver_version,
            gpus=[_gpu_info(gpu) for gpu in facts.gpus],
            links=None if links is None else cast(TopologyResult, asdict(links)),
        )
