"""Parsers for nvidia-smi's outputs, and the facts that run it.

Each fact runs its command through `sh -c '...; echo rc=$?'` so a failing nvidia-smi (no driver, the
"Driver/library version mismatch" after an upgrade) is data for the deploy to act on, not a failed host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RC_LINE = re.compile(r"^rc=(\d+)$")

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


@dataclass(frozen=True)
class SmiResult:
    """What one nvidia-smi call said: its exit code and its lines (stdout and stderr together)."""

    rc: int
    lines: list[str]

    @property
    def error(self) -> str | None:
        """nvidia-smi's own error sentence when it failed (e.g. the NVML version mismatch), else None."""
        if self.rc == 0:
            return None
        text = [line.strip() for line in self.lines if line.strip()]
        return text[0] if text else f"nvidia-smi exited {self.rc}"


def split_rc(lines: list[str]) -> SmiResult:
    """Separate the trailing `rc=N` line our wrapper adds from the tool's own output."""
    if lines and (match := RC_LINE.match(lines[-1].strip())):
        return SmiResult(int(match.group(1)), lines[:-1])
    return SmiResult(0, lines)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_query_gpu(lines: list[str], fields: tuple[str, ...] = GPU_FIELDS) -> list[dict[str, Any]]:
    """`--query-gpu=<fields> --format=csv,noheader,nounits` -> one dict per GPU."""
    gpus = []
    for line in lines:
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"expected {len(fields)} fields, got {len(cells)}: {line!r}")
        row = dict(zip(fields, cells, strict=True))
        gpus.append(
            {
                "index": int(row["index"]),
                "name": row["name"],
                "uuid": row["uuid"],
                "memory_mib": int(row["memory.total"]),
                "compute_cap": row["compute_cap"],
                "driver_version": row["driver_version"],
                "persistence": row["persistence_mode"] == "Enabled",
                "power_limit_w": _number(row["power.limit"]),
                "power_min_w": _number(row["power.min_limit"]),
                "power_max_w": _number(row["power.max_limit"]),
                "pcie_width": int(row["pcie.link.width.current"]),
                "pcie_width_max": int(row["pcie.link.width.max"]),
                "bus_id": row["pci.bus_id"],
            }
        )
    return gpus


def parse_matrix(lines: list[str]) -> dict[str, dict[str, str]]:
    """`topo -m` / `topo -p2p X` -> {"GPU0": {"GPU1": "NV2", ...}, ...} (GPU columns only)."""
    rows = [ANSI.sub("", line).rstrip("\n") for line in lines]
    header = next((r for r in rows if r.strip().startswith("GPU0")), None)
    if header is None:
        return {}
    columns = [c.strip() for c in header.strip().split("\t")]
    gpu_columns = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    matrix: dict[str, dict[str, str]] = {}
    for row in rows[rows.index(header) + 1 :]:
        cells = [c.strip() for c in row.strip().split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if matrix:
                break  # the legend starts
            continue
        matrix[cells[0]] = dict(zip(gpu_columns, cells[1 : 1 + len(gpu_columns)], strict=False))
    return matrix


NVLINK_GPU = re.compile(r"^GPU (\d+): ")
NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.+?)\s*$")


def parse_nvlink_status(lines: list[str]) -> dict[int, list[float | None]]:
    """`nvlink -s` -> {gpu index: [GB/s per link, None where inactive]}. No NVLink: {} or empty lists."""
    links: dict[int, list[float | None]] = {}
    current: int | None = None
    for line in lines:
        if match := NVLINK_GPU.match(line):
            current = int(match.group(1))
            links[current] = []
        elif (match := NVLINK_LINK.match(line)) and current is not None:
            speed = re.match(r"([\d.]+) GB/s", match.group(2))
            links[current].append(float(speed.group(1)) if speed else None)
    return links


def parse_bar1(lines: list[str]) -> list[dict[str, int]]:
    """`-q -d MEMORY` -> [{"fb_total_mib": N, "bar1_total_mib": M}] per GPU, in order."""
    gpus: list[dict[str, int]] = []
    section = None
    for line in lines:
        stripped = line.strip()
        if line.startswith("GPU "):
            gpus.append({})
        elif stripped in ("FB Memory Usage", "BAR1 Memory Usage"):
            section = "fb" if stripped.startswith("FB") else "bar1"
        elif stripped.endswith("Memory Usage"):
            section = None
        elif gpus and section and (match := re.match(r"Total\s*:\s*(\d+) MiB", stripped)):
            gpus[-1][f"{section}_total_mib"] = int(match.group(1))
    return gpus


def _wrapped(command: str) -> str:
    return f"sh -c '{command} 2>&1; echo rc=$?'"


class NvidiaGpus(FactBase):
    """GPUs as the driver sees them: {"rc", "error", "gpus": [...]}; None when nvidia-smi is absent."""

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
        gpus = parse_query_gpu(result.lines) if result.rc == 0 else []
        # BAR1 per GPU, in the same order as the query's rows (both follow nvidia-smi's index order).
        for gpu, memory in zip(gpus, parse_bar1(sections.get("memory", [])), strict=False):
            gpu["bar1_mib"] = memory.get("bar1_total_mib")
        return {"rc": result.rc, "error": result.error, "gpus": gpus}


class NvidiaTopology(FactBase):
    """Links between GPUs: {"rc", "error", "topo": matrix of NV2/PHB/..., "p2p": matrix of OK/CNS/...,
    "nvlink": {gpu: [GB/s]}}. One remote command for all three."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        parts = ("nvidia-smi topo -m", "nvidia-smi topo -p2p rw", "nvidia-smi nvlink -s")
        return "sh -c '" + "; ".join(f"echo @@{p.split()[-1]}; {p} 2>&1; echo rc=$?" for p in parts) + "'"

    def process(self, output: list[str]) -> dict[str, Any]:
        sections = split_sections(output)
        results = {name: split_rc(lines) for name, lines in sections.items()}
        failed = next((r for r in results.values() if r.rc != 0), None)
        return {
            "rc": failed.rc if failed else 0,
            "error": failed.error if failed else None,
            "topo": parse_matrix(results["-m"].lines) if "-m" in results else {},
            "p2p": parse_matrix(results["rw"].lines) if "rw" in results else {},
            "nvlink": parse_nvlink_status(results["-s"].lines) if "-s" in results else {},
        }
