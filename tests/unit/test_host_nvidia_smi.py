"""vllm_rig/host/nvidia_smi.py, the parser of nvidia-smi's error sentence and of /proc/driver/nvidia, on real
outputs only: tests/unit/fixtures/tool_outputs/<box>/, captured on the H200 (h200/) or copied from public
reports (each folder's README names the URL). The test names the fixture it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_rig.host import gpu_facts
from vllm_rig.host import nvidia_smi as smi

OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"


def out(path: str) -> list[str]:
    return (OUTPUTS / f"{path}.out").read_text().splitlines()


def rc(path: str) -> int:
    return int((OUTPUTS / f"{path}.rc").read_text())


# --- NVML errors ---------------------------------------------------------------------------------------
def test_mismatch_keeps_the_nvml_library_version() -> None:
    """Case 4: truenas-580/nvidia-smi_plain (NVML library 580.178 over a 580.173.02 module) and
    taskcluster-550/nvidia-smi_plain (exit 18); URLs in their READMEs."""
    error = smi.parse_error(out("truenas-580/nvidia-smi_plain"), 18)
    assert error == smi.SmiError("Failed to initialize NVML: Driver/library version mismatch", 18, True, "580.178")
    error = smi.parse_error(out("taskcluster-550/nvidia-smi_plain"), rc("taskcluster-550/nvidia-smi_plain"))
    assert error.mismatch and error.library_version == "550.144"


def test_other_errors_are_not_a_mismatch() -> None:
    """h200/nvidia-smi_bad_index: an error without the NVML lines."""
    error = smi.parse_error(out("h200/nvidia-smi_bad_index"), rc("h200/nvidia-smi_bad_index"))
    assert error.message.startswith("ERROR: Option -i is not valid") and not error.mismatch
    assert error.library_version is None
    assert smi.parse_error([], 9).message == "nvidia-smi exited 9"


# --- /proc/driver/nvidia/version -----------------------------------------------------------------------
def test_module_version_and_flavour() -> None:
    """Case 3: h200/proc_driver_nvidia_version (the open module) and truenas-580/proc_driver_nvidia_version
    (the proprietary one)."""
    assert smi.parse_driver_module(out("h200/proc_driver_nvidia_version")) == smi.DriverModule("580.159.04", "open")
    assert smi.parse_driver_module(out("truenas-580/proc_driver_nvidia_version")) == smi.DriverModule(
        "580.173.02", "proprietary"
    )


def test_no_module_loaded_is_no_version_and_no_problem() -> None:
    """The host fact's `cat ... 2>/dev/null || true` gives nothing when no module is loaded."""
    assert smi.parse_driver_module([]) == smi.DriverModule()
    odd = smi.parse_driver_module(out("h200/nvidia-smi_version"))
    assert odd.version is None and odd.problem.startswith("no NVRM version line")


# --- topology and P2P matrices ---------------------------------------------------------------------------
# --- never raise ----------------------------------------------------------------------------------------
ALL_OUTPUTS = sorted(str(p.relative_to(OUTPUTS))[: -len(".out")] for p in OUTPUTS.glob("*/*.out"))


@pytest.mark.parametrize("name", ALL_OUTPUTS)
def test_every_parser_reads_every_real_output_without_raising(name: str) -> None:
    """Any real output, fed to any parser (with and without a failing exit code), gives a result."""
    lines = out(name)
    for code in (0, 1):
        gpu_facts.parse("\n".join(lines), rc=code)
        smi.parse_error(lines, code)
    smi.parse_driver_module(lines)
