"""The facts that run nvidia-smi on the host; vllm_rig/host/gpu_facts.py reads its XML (the reader the host's
GPU verdict, GPU wait and the status view use too), vllm_rig/host/nvidia_smi.py the topology and NVLink
commands whose facts the XML lacks.

Both are `SectionFact`s (vllm_rig/core/facts.py). Each nvidia-smi call in a section ends with
`echo rc=$?`, so a failing nvidia-smi (no driver, the "Driver/library version mismatch" after an upgrade)
is data for the deploy to act on, not a failed host.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TypedDict, cast

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.host import gpu_facts
from vllm_rig.host.nvidia_smi import parse_matrix, parse_nvlink_status, split_rc


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


class GpusResult(TypedDict):
    """NvidiaGpus: nvidia-smi's exit status and error line, the NVML library's version where the error
    names it, why its XML was not understood, the driver version and the GPUs."""

    rc: int
    error: str | None
    library_version: str | None
    problem: str | None
    driver_version: str | None
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


def _gpu_info(gpu: gpu_facts.Gpu) -> GpuInfo:
    info = asdict(gpu)
    info.pop("processes")
    return cast(GpuInfo, info)  # GpuInfo names Gpu's fields but its processes


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
        return section_command({"xml": _with_rc(" ".join(gpu_facts.COMMAND))})

    def parse(self, sections: Sections) -> GpusResult:
        result = split_rc(sections.lines("xml"))
        facts = gpu_facts.parse("\n".join(result.lines), result.rc)
        return GpusResult(
            rc=result.rc,
            error=facts.error.message if facts.error else None,
            # The NVML mismatch names the library's version ("NVML library version: 580.178"): preflight
            # puts it beside the loaded module's.
            library_version=facts.error.library_version if facts.error else None,
            problem=facts.problem,
            driver_version=facts.driver_version,
            gpus=[_gpu_info(gpu) for gpu in facts.gpus],
        )


class NvidiaTopology(SectionFact[TopologyResult | None]):
    """Links between GPUs, one remote command for three; None when nvidia-smi is absent (or the host
    failed). A section that is missing altogether reads as exit 127 (not run). nvidia-smi's XML has no
    topology matrix, no P2P grant and no NVLink link states (its DTD has none of them): these three stay
    on the text commands, each read by one parser in vllm_rig/host/nvidia_smi.py."""

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
