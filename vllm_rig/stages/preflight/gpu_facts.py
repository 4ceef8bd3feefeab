"""The facts that run nvidia-smi; its outputs are read by vllm_rig/host/nvidia_smi.py, the parser the host's
GPU verdict uses too.

Both are `SectionFact`s (vllm_rig/core/facts.py). Each nvidia-smi call in a section ends with
`echo rc=$?`, so a failing nvidia-smi (no driver, the "Driver/library version mismatch" after an upgrade)
is data for the deploy to act on, not a failed host.
"""

from __future__ import annotations

from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.host.nvidia_smi import (
    Gpu,
    parse_error,
    parse_matrix,
    parse_memory,
    parse_nvlink_status,
    parse_query_gpu,
    split_rc,
)

# Fields the GPU fact asks for, in order (names as nvidia-smi --help-query-gpu spells them).
GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "compute_cap",
    "driver_version",
    "persistence_mode",
    "power.limit",
    "power.min_limit",
    "power.max_limit",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "pci.bus_id",
)


class GpuInfo(TypedDict):
    """What preflight reads of one GPU (Gpu's attributes for GPU_FIELDS); None where nvidia-smi said [N/A]."""

    index: int | None
    name: str | None
    uuid: str | None
    memory_mib: int | None
    compute_cap: str | None
    driver_version: str | None
    persistence: bool | None
    power_limit_w: float | None
    power_min_w: float | None
    power_max_w: float | None
    pcie_width: int | None
    pcie_width_max: int | None
    bus_id: str | None
    bar1_mib: int | None  # from `nvidia-smi -q -d MEMORY`; None where it lists no block for this GPU


class GpusResult(TypedDict):
    """NvidiaGpus: nvidia-smi's exit status and error line, the NVML library's version where the error
    names it, the rows not understood, and the GPUs."""

    rc: int
    error: str | None
    library_version: str | None
    problem: str | None
    gpus: list[GpuInfo]


class TopologyResult(TypedDict):
    """NvidiaTopology: the first failing command's rc and error, {command: sentence} for each command that
    failed or was not understood, the topo and p2p matrices, NVLink speeds and the links that are down."""

    rc: int
    error: str | None
    problems: dict[str, str]
    topo: dict[str, dict[str, str]]
    p2p: dict[str, dict[str, str]]
    nvlink: dict[int, list[float | None]]
    nvlink_down: list[str]


def _gpu_info(gpu: Gpu, bar1_mib: int | None) -> GpuInfo:
    return GpuInfo(
        index=gpu.index,
        name=gpu.name,
        uuid=gpu.uuid,
        memory_mib=gpu.memory_mib,
        compute_cap=gpu.compute_cap,
        driver_version=gpu.driver_version,
        persistence=gpu.persistence,
        power_limit_w=gpu.power_limit_w,
        power_min_w=gpu.power_min_w,
        power_max_w=gpu.power_max_w,
        pcie_width=gpu.pcie_width,
        pcie_width_max=gpu.pcie_width_max,
        bus_id=gpu.bus_id,
        bar1_mib=bar1_mib,
    )


def _with_rc(command: str) -> str:
    """The command's output and error, then its exit status as `rc=N` (split_rc reads it back)."""
    return f"{command} 2>&1; echo rc=$?"


class NvidiaGpus(SectionFact[GpusResult | None]):
    """GPUs as the driver sees them; None when nvidia-smi is absent (or the host failed)."""

    @staticmethod
    def default() -> GpusResult | None:
        return None

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        query = f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits"
        return section_command({"query": _with_rc(query), "memory": "nvidia-smi -q -d MEMORY 2>&1"})

    def parse(self, sections: Sections) -> GpusResult:
        result = split_rc(sections.lines("query"))
        query = parse_query_gpu(result.lines, GPU_FIELDS, rc=result.rc)
        # BAR1 per GPU, in the same order as the query's rows (both follow nvidia-smi's index order).
        bar1 = [memory.bar1_total_mib for memory in parse_memory(sections.lines("memory"))]
        gpus = [_gpu_info(gpu, bar1[i] if i < len(bar1) else None) for i, gpu in enumerate(query.gpus)]
        error = parse_error(result.lines, result.rc) if result.rc != 0 else None
        return GpusResult(
            rc=result.rc,
            error=error.message if error else None,
            # The NVML mismatch names the library's version ("NVML library version: 580.178"): preflight
            # puts it beside the loaded module's.
            library_version=error.library_version if error else None,
            problem=None if result.rc != 0 else query.problem,
            gpus=gpus,
        )


class NvidiaTopology(SectionFact[TopologyResult | None]):
    """Links between GPUs, one remote command for three; None when nvidia-smi is absent (or the host
    failed). A section that is missing altogether reads as exit 127 (not run)."""

    COMMANDS = {"-m": "topo -m", "rw": "topo -p2p rw", "-s": "nvlink -s"}

    @staticmethod
    def default() -> TopologyResult | None:
        return None

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return section_command({name: _with_rc(f"nvidia-smi {c}") for name, c in self.COMMANDS.items()})

    def parse(self, sections: Sections) -> TopologyResult:
        results = {name: split_rc(sections.lines(name) if name in sections else ["rc=127"]) for name in self.COMMANDS}
        failed = next((r for r in results.values() if r.rc != 0), None)
        topo = parse_matrix(results["-m"].lines, results["-m"].rc, "topo -m")
        p2p = parse_matrix(results["rw"].lines, results["rw"].rc, "topo -p2p rw")
        nvlink = parse_nvlink_status(results["-s"].lines, results["-s"].rc)
        problems = {
            command: problem
            for command, problem in zip(
                self.COMMANDS.values(), (topo.problem, p2p.problem, nvlink.problem), strict=True
            )
            if problem
        }
        return TopologyResult(
            rc=failed.rc if failed else 0,
            error=failed.error if failed else None,
            problems=problems,
            topo=topo.cells,
            p2p=p2p.cells,
            nvlink=nvlink.speeds(),
            nvlink_down=nvlink.down(),
        )
