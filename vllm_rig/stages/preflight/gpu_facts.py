"""The facts that run nvidia-smi; its outputs are read by vllm_rig/host/nvidia_smi.py, the parser the host's
GPU verdict uses too.

Each fact runs its command through `sh -c '...; echo rc=$?'` so a failing nvidia-smi (no driver, the
"Driver/library version mismatch" after an upgrade) is data for the deploy to act on, not a failed host.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections
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
# What preflight reads of each GPU (Gpu's attributes for those fields); None where nvidia-smi said [N/A].
GPU_KEYS = (
    "index",
    "name",
    "uuid",
    "memory_mib",
    "compute_cap",
    "driver_version",
    "persistence",
    "power_limit_w",
    "power_min_w",
    "power_max_w",
    "pcie_width",
    "pcie_width_max",
    "bus_id",
)


def _gpu_dict(gpu: Gpu) -> dict[str, Any]:
    return {key: getattr(gpu, key) for key in GPU_KEYS}


def _wrapped(command: str) -> str:
    return f"sh -c '{command} 2>&1; echo rc=$?'"


class NvidiaGpus(FactBase):
    """GPUs as the driver sees them: {"rc", "error", "library_version" (of NVML, where the error names it),
    "problem" (rows not understood), "gpus": [...]}; None when nvidia-smi is absent."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        query = f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits"
        return (
            "sh -c '"
            + f"echo @@query; {query} 2>&1; echo rc=$?; echo @@memory; nvidia-smi -q -d MEMORY 2>&1; true"
            + "'"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        sections = split_sections(output) if output and output[0].startswith("@@") else {"query": output}
        result = split_rc(sections.get("query", []))
        query = parse_query_gpu(result.lines, GPU_FIELDS, rc=result.rc)
        gpus = [_gpu_dict(gpu) for gpu in query.gpus]
        # BAR1 per GPU, in the same order as the query's rows (both follow nvidia-smi's index order).
        for gpu, memory in zip(gpus, parse_memory(sections.get("memory", [])), strict=False):
            gpu["bar1_mib"] = memory.bar1_total_mib
        error = parse_error(result.lines, result.rc) if result.rc != 0 else None
        return {
            "rc": result.rc,
            "error": error.message if error else None,
            # The NVML mismatch names the library's version ("NVML library version: 580.178"): preflight
            # puts it beside the loaded module's.
            "library_version": error.library_version if error else None,
            "problem": None if result.rc != 0 else query.problem,
            "gpus": gpus,
        }


class NvidiaTopology(FactBase):
    """Links between GPUs, one remote command for three: {"rc", "error" (the first failing command's),
    "problems": {command: sentence} for each command that failed or was not understood, "topo": matrix of
    NV2/PHB/..., "p2p": matrix of OK/CNS/..., "nvlink": {gpu: [GB/s, None where down]}, "nvlink_down":
    ["GPU1 link 1", "GPU0 all links", ...]}."""

    COMMANDS = {"-m": "topo -m", "rw": "topo -p2p rw", "-s": "nvlink -s"}

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        parts = [f"nvidia-smi {c}" for c in self.COMMANDS.values()]
        return "sh -c '" + "; ".join(f"echo @@{p.split()[-1]}; {p} 2>&1; echo rc=$?" for p in parts) + "'"

    def process(self, output: list[str]) -> dict[str, Any]:
        sections = split_sections(output)
        results = {name: split_rc(sections.get(name, ["rc=127"])) for name in self.COMMANDS}
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
        return {
            "rc": failed.rc if failed else 0,
            "error": failed.error if failed else None,
            "problems": problems,
            "topo": topo.cells,
            "p2p": p2p.cells,
            "nvlink": nvlink.speeds(),
            "nvlink_down": nvlink.down(),
        }
