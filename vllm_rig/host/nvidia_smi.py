"""nvidia-smi's error sentence and the loaded module's version line: the one copy both sides use.

The GPUs are read from `nvidia-smi -q -x` (gpu_facts.py) and the links between them through NVML (nvml.py); a
failing nvidia-smi prints a sentence, not XML (the NVML mismatch, "No devices were found"), read here. The
control side imports it as `vllm_rig.host.nvidia_smi`, the host package relatively: standard library only.
None of the parsers raises on odd input (real outputs: tests/unit/fixtures/tool_outputs/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MISMATCH = "Driver/library version mismatch"


def first_line(lines: list[str], rc: int, default: str = "") -> str:
    """The tool's own sentence: its first non-empty line, else "exited N" (nvidia-smi's errors, such as the
    NVML mismatch or "No devices were found", come first)."""
    text = next((ANSI.sub("", line).strip() for line in lines if line.strip()), "")
    return text or default or f"exited {rc}"


# ---- nvidia-smi's errors -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmiError:
    """A failed nvidia-smi: its sentence, its exit code (127: not installed), whether it is the NVML mismatch,
    and the NVML library version the mismatch names (newer drivers print "NVML library version: 580.178")."""

    message: str
    rc: int = 1
    mismatch: bool = False
    library_version: str | None = None


NVML_LIBRARY = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")


def parse_error(lines: list[str], rc: int) -> SmiError:
    text = [ANSI.sub("", line).strip() for line in lines if line.strip()]
    match = next((m for line in text if (m := NVML_LIBRARY.search(line))), None)
    return SmiError(
        message=first_line(lines, rc, f"nvidia-smi exited {rc}"),
        rc=rc,
        mismatch=any(MISMATCH.lower() in line.lower() for line in text),
        library_version=match.group(1) if match else None,
    )


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
