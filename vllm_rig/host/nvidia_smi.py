"""Parsers for what nvidia-smi's XML does not carry, and for its errors: the one copy both sides use.

The GPUs themselves are read from `nvidia-smi -q -x` (gpu_facts.py). Its DTD has no topology matrix, no P2P
grant and no NVLink link states, so `topo -m`, `topo -p2p` and `nvlink -s` are read here; and a failing
nvidia-smi prints a sentence, not XML (the NVML mismatch, "No devices were found").

The control side's facts and preflight import it as `vllm_rig.host.nvidia_smi`; the host's GPU verdict
imports it relatively, inside the zipped host package the system Python runs. So: standard library only.

Every parser takes the lines a command printed (and, where it matters, its exit code) and returns a frozen
result. None of them raises on odd input: a value that could not be read is None, and `problem` says why
(a failed command, a row with too few cells, a matrix without its header). Formats are those of real
outputs, tests/unit/fixtures/tool_outputs/ (tabs as the tool prints them, or spaces where a terminal copy
expanded them; `[N/A]` in numeric columns; the one-line "all links are inActive" answer of `nvlink -s`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MISMATCH = "Driver/library version mismatch"


def first_line(lines: list[str], rc: int, default: str = "") -> str:
    """The tool's own sentence: its first non-empty line, else "exited N" (nvidia-smi's errors, such as the
    NVML mismatch or "No devices were found", come first)."""
    text = next((ANSI.sub("", line).strip() for line in lines if line.strip()), "")
    return text or default or f"exited {rc}"


# ---- the `echo rc=$?` wrapper of the control side's facts ----------------------------------------------
RC_LINE = re.compile(r"^rc=(\d+)$")


@dataclass(frozen=True)
class SmiResult:
    """What one wrapped nvidia-smi call said: its exit code and its lines (stdout and stderr together)."""

    rc: int
    lines: list[str]

    @property
    def error(self) -> str | None:
        """nvidia-smi's own error sentence when it failed (e.g. the NVML version mismatch), else None."""
        return None if self.rc == 0 else first_line(self.lines, self.rc, f"nvidia-smi exited {self.rc}")


def split_rc(lines: list[str]) -> SmiResult:
    """Separate the trailing `rc=N` line a fact's wrapper adds from the tool's own output."""
    if lines and (match := RC_LINE.match(lines[-1].strip())):
        return SmiResult(int(match.group(1)), lines[:-1])
    return SmiResult(0, lines)


# ---- nvidia-smi's errors -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmiError:
    """A failed nvidia-smi: its sentence, whether it is the NVML mismatch, and the NVML library version the
    mismatch names (newer drivers print "NVML library version: 580.178" on the next line)."""

    message: str
    mismatch: bool = False
    library_version: str | None = None


NVML_LIBRARY = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")


def parse_error(lines: list[str], rc: int) -> SmiError:
    text = [ANSI.sub("", line).strip() for line in lines if line.strip()]
    match = next((m for line in text if (m := NVML_LIBRARY.search(line))), None)
    return SmiError(
        message=first_line(lines, rc, f"nvidia-smi exited {rc}"),
        mismatch=any(MISMATCH.lower() in line.lower() for line in text),
        library_version=match.group(1) if match else None,
    )


# ---- topo -m and topo -p2p X -------------------------------------------------------------------------
GPU_NAME = re.compile(r"^GPU\d+$")


@dataclass(frozen=True)
class Matrix:
    """`topo -m` (NV2, PHB, SYS...) or `topo -p2p r|w|rw|n|a|p` (OK, CNS, GNS...) between GPUs: cells[a][b]
    for GPU names "GPU0".. (NIC rows and columns, CPU/NUMA affinity left out)."""

    gpus: tuple[str, ...] = ()
    cells: dict[str, dict[str, str]] = field(default_factory=dict)
    problem: str | None = None

    def get(self, a: str, b: str) -> str | None:
        return self.cells.get(a, {}).get(b)

    def pairs(self) -> list[tuple[str, str]]:
        """Every unordered pair of GPUs, GPU0-GPU1 first."""
        return [(a, b) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1 :]]


def parse_matrix(lines: list[str], rc: int = 0, command: str = "topo -m") -> Matrix:
    """The GPU part of a topology matrix. Cells are split on any whitespace: the tool separates them with
    tabs, a terminal copy with spaces, and every GPU-to-GPU cell is one word (" X " included); the GPU
    columns come first, so affinity columns with spaces in their names do not shift them."""
    if rc != 0:
        return Matrix(problem=f"nvidia-smi {command} exited {rc}: {first_line(lines, rc)}")
    rows = [ANSI.sub("", line).split() for line in lines]
    header_at = next((i for i, words in enumerate(rows) if words[:1] == ["GPU0"]), None)
    if header_at is None:
        text = first_line(lines, rc, "nothing")
        return Matrix(problem=f"nvidia-smi {command}: no GPU0 column in its output ({text})")
    gpus = tuple(w for w in rows[header_at] if GPU_NAME.match(w))
    cells: dict[str, dict[str, str]] = {}
    problems = []
    for words in rows[header_at + 1 :]:
        if not words or not GPU_NAME.match(words[0]):
            if cells and words[:1] == ["Legend:"]:
                break
            continue  # NIC rows, blank lines
        values = words[1 : 1 + len(gpus)]
        if len(values) < len(gpus):
            problems.append(f"{words[0]} has {len(values)} of {len(gpus)} cells")
        cells[words[0]] = dict(zip(gpus, values, strict=False))
    if missing := [g for g in gpus if g not in cells]:
        problems.append(f"no row for {', '.join(missing)}")
    return Matrix(gpus, cells, f"nvidia-smi {command}: {'; '.join(problems)}" if problems else None)


# ---- nvlink -s -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    number: int
    gbps: float | None  # None: not up ("<inactive>")
    state: str  # the tool's word for it: "25.781 GB/s", "<inactive>"


@dataclass(frozen=True)
class GpuLinks:
    """One GPU's block of `nvlink -s`: its links, or all_inactive when NVML answered "Unable to retrieve
    NVLink information as all links are inActive" (a bridge that is missing or not seated, a failed link)."""

    index: int
    name: str = ""
    links: tuple[Link, ...] = ()
    all_inactive: bool = False
    no_nvlink: bool = False  # "Device does not have or support Nvlink": no NVLink on this GPU, a verdict

    @property
    def down(self) -> list[int]:
        return [link.number for link in self.links if link.gbps is None]


@dataclass(frozen=True)
class NvlinkStatus:
    """`nvidia-smi nvlink -s`: per GPU, per link. No NVLink hardware at all: no GPUs (the tool prints
    nothing), which is not the same as GPUs whose links are all inactive."""

    gpus: dict[int, GpuLinks] = field(default_factory=dict)
    problem: str | None = None

    def down(self) -> list[str]:
        """Every link that is not up, as "GPU1 link 1"; "GPU2 all links" for the one-message answer."""
        out = []
        for index, gpu in sorted(self.gpus.items()):
            if gpu.all_inactive:
                out.append(f"GPU{index} all links")
            out += [f"GPU{index} link {n}" for n in gpu.down]
        return out

    def speeds(self) -> dict[int, list[float | None]]:
        """{gpu index: [GB/s per link, None where not up]}, the shape the verdict's JSON prints."""
        return {index: [link.gbps for link in gpu.links] for index, gpu in sorted(self.gpus.items())}


NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)\s*(?:\(UUID: [^)]*\))?\s*$")
NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
NVLINK_SPEED = re.compile(r"^([\d.]+) GB/s")
ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)
# Newer drivers (595 on, and 580.x on some boxes) answer for a GPU without NVLink (canonical/checkbox PR 2727).
NO_NVLINK = re.compile(r"^\s*Device does not have or support Nvlink\.?\s*$", re.IGNORECASE)


def parse_nvlink_status(lines: list[str], rc: int = 0) -> NvlinkStatus:
    if rc != 0:
        return NvlinkStatus(problem=f"nvidia-smi nvlink -s exited {rc}: {first_line(lines, rc)}")
    blocks: dict[int, dict] = {}
    current: dict | None = None
    unread = []
    for raw in lines:
        line = ANSI.sub("", raw).rstrip()
        if match := NVLINK_GPU.match(line):
            current = blocks.setdefault(
                int(match.group(1)), {"name": match.group(2), "links": [], "all": False, "none": False}
            )
        elif current is not None and (match := NVLINK_LINK.match(line)):
            speed = NVLINK_SPEED.match(match.group(2))
            current["links"].append(Link(int(match.group(1)), float(speed.group(1)) if speed else None, match.group(2)))
        elif current is not None and ALL_INACTIVE.search(line):
            current["all"] = True
        elif current is not None and NO_NVLINK.match(line):
            current["none"] = True
        elif line.strip():
            unread.append(line.strip())
    gpus = {i: GpuLinks(i, b["name"], tuple(b["links"]), b["all"], b["none"]) for i, b in blocks.items()}
    problem = f"nvidia-smi nvlink -s: not understood: {unread[0]}" if unread else None
    return NvlinkStatus(gpus, problem)


# ---- /proc/driver/nvidia/version -------------------------------------------------------------------------
@dataclass(frozen=True)
class DriverModule:
    """The loaded kernel module, from /proc/driver/nvidia/version: its version and its flavour, "open"
    ("NVIDIA UNIX Open Kernel Module for x86_64  580.159.04") or "proprietary" ("NVIDIA UNIX x86_64 Kernel
    Module  580.173.02"). Nothing loaded (no file): version None, problem None."""

    version: str | None = None
    flavour: str | None = None
    problem: str | None = None


NVRM_LINE = re.compile(r"NVRM version:\s*(?P<what>.*?)\s+(?P<version>\d{3}\.\d+(?:\.\d+)?)(?:\s|$)")


def parse_driver_module(lines: list[str]) -> DriverModule:
    line = next((ANSI.sub("", x).strip() for x in lines if "NVRM version:" in x), None)
    if line is None:
        text = next((x.strip() for x in lines if x.strip()), "")
        return DriverModule(problem=f"no NVRM version line: {text}" if text else None)
    match = NVRM_LINE.search(line)
    if match is None:
        return DriverModule(problem=f"NVRM version line not understood: {line}")
    what = match.group("what")
    if "Open Kernel Module" in what:
        flavour = "open"
    elif "Kernel Module" in what:
        flavour = "proprietary"
    else:
        flavour = None
    return DriverModule(match.group("version"), flavour, None if flavour else f"unknown module kind: {what}")
