"""vllm_rig/host/nvidia_smi.py, the parser of what nvidia-smi's XML lacks and of /proc/driver/nvidia, on real
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
    assert error == smi.SmiError("Failed to initialize NVML: Driver/library version mismatch", True, "580.178")
    error = smi.parse_error(out("taskcluster-550/nvidia-smi_plain"), rc("taskcluster-550/nvidia-smi_plain"))
    assert error.mismatch and error.library_version == "550.144"
    result = smi.split_rc([*out("truenas-580/nvidia-smi_plain"), "rc=18"])
    assert result.error == "Failed to initialize NVML: Driver/library version mismatch"


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
def test_single_gpu_matrices_real_h200() -> None:
    """h200/nvidia-smi_topo_m, _topo_p2p_rw and _topo_p2p_n (ANSI underline in the header, tabs)."""
    for name in ("nvidia-smi_topo_m", "nvidia-smi_topo_p2p_rw", "nvidia-smi_topo_p2p_n"):
        matrix = smi.parse_matrix(out(f"h200/{name}"))
        assert (matrix.gpus, matrix.cells, matrix.problem) == (("GPU0",), {"GPU0": {"GPU0": "X"}}, None), name
        assert matrix.pairs() == []


def test_topology_with_tabs() -> None:
    """rtx5090/nvidia-smi_topo_m (PHB), rtx3090/nvidia-smi_topo_m (SYS, an empty NUMA cell) and
    rtx4090/nvidia-smi_topo_m (eight GPUs and two NIC rows, no legend)."""
    assert smi.parse_matrix(out("rtx5090/nvidia-smi_topo_m")).cells == {
        "GPU0": {"GPU0": "X", "GPU1": "PHB"},
        "GPU1": {"GPU0": "PHB", "GPU1": "X"},
    }
    assert smi.parse_matrix(out("rtx3090/nvidia-smi_topo_m")).get("GPU1", "GPU0") == "SYS"
    eight = smi.parse_matrix(out("rtx4090/nvidia-smi_topo_m"))
    assert eight.gpus == tuple(f"GPU{i}" for i in range(8)) and set(eight.cells) == set(eight.gpus)
    assert eight.get("GPU6", "GPU7") == "SYS" and eight.problem is None and len(eight.pairs()) == 28


def test_topology_and_p2p_aligned_with_spaces() -> None:
    """Case 1: matrices whose tabs a terminal copy turned into spaces: h100/nvidia-smi_topo_m (NV6, four
    NIC columns), rtx3090/nvidia-smi_topo_m_spaces, rtx5090/nvidia-smi_topo_p2p_rw_spaces (GNS)."""
    h100 = smi.parse_matrix(out("h100/nvidia-smi_topo_m"))
    assert h100.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and h100.problem is None
    assert {h100.get(a, b) for a, b in h100.pairs()} == {"NV6"} and h100.get("GPU2", "GPU2") == "X"
    assert (
        smi.parse_matrix(out("rtx3090/nvidia-smi_topo_m_spaces")).cells
        == smi.parse_matrix(out("rtx5090/nvidia-smi_topo_m")).cells
    )  # both PHB between two GPUs
    spaces = smi.parse_matrix(out("rtx5090/nvidia-smi_topo_p2p_rw_spaces"), command="topo -p2p rw")
    tabs = smi.parse_matrix(out("rtx5090/nvidia-smi_topo_p2p_rw"), command="topo -p2p rw")
    assert spaces == tabs and spaces.get("GPU0", "GPU1") == "GNS"


def test_topology_command_that_fails_says_so() -> None:
    """Case 6: h200/nvidia-smi_topo_m_bad_index (exit 6) and h200/nvidia-smi_topo_p2p_missing_value (exit 2)."""
    failed = smi.parse_matrix(out("h200/nvidia-smi_topo_m_bad_index"), rc("h200/nvidia-smi_topo_m_bad_index"))
    assert failed == smi.Matrix(problem="nvidia-smi topo -m exited 6: No devices were found")
    name = "h200/nvidia-smi_topo_p2p_missing_value"
    failed = smi.parse_matrix(out(name), rc(name), command="topo -p2p rw")
    assert failed.problem == 'nvidia-smi topo -p2p rw exited 2: Option "-p2p" is missing its value.'
    # The same words with exit 0 (a wrapper that lost the code) are no matrix either, and say why.
    assert smi.parse_matrix(out(name)).problem.startswith("nvidia-smi topo -m: no GPU0 column")


# --- nvlink -s ------------------------------------------------------------------------------------------
def test_nvlink_up_real_2080ti() -> None:
    """rtx2080ti/nvidia-smi_nvlink_status_i2 and _i3: two links each at 25.781 GB/s."""
    status = smi.parse_nvlink_status(
        out("rtx2080ti/nvidia-smi_nvlink_status_i2") + out("rtx2080ti/nvidia-smi_nvlink_status_i3")
    )
    assert status.speeds() == {2: [25.781, 25.781], 3: [25.781, 25.781]}
    assert status.gpus[2].name == "GeForce RTX 2080 Ti" and status.down() == []
    assert status.problem is None


def test_nvlink_inactive_links_are_named() -> None:
    """Case 5 (the parser's half): v100/nvidia-smi_nvlink_s, links 3 and 5 of GPU 3 `<inactive>`."""
    status = smi.parse_nvlink_status(out("v100/nvidia-smi_nvlink_s"))
    assert status.speeds() == {3: [25.781, 25.781, 25.781, None, 25.781, None]}
    assert status.down() == ["GPU3 link 3", "GPU3 link 5"] and status.gpus[3].links[3].state == "<inactive>"


def test_all_links_inactive_is_not_no_nvlink() -> None:
    """Case 2: b200/nvidia-smi_nvlink_s answers for GPU 2 in one NVML message; h200/nvidia-smi_nvlink_s
    (a GPU without NVLink peers) prints nothing."""
    down = smi.parse_nvlink_status(out("b200/nvidia-smi_nvlink_s"))
    assert down.gpus[2].all_inactive and down.gpus[2].links == ()
    assert down.down() == ["GPU2 all links"] and down.problem is None
    # The message as the title of open-gpu-kernel-modules#1150 spells it (in b200/README.md), under the
    # B200's GPU line, reads the same.
    spelled = [
        out("b200/nvidia-smi_nvlink_s")[0],
        "NVML:Unable to retrieve Nvlink information as all links are inActive",
    ]
    assert smi.parse_nvlink_status(spelled).gpus[2].all_inactive
    none = smi.parse_nvlink_status(out("h200/nvidia-smi_nvlink_s"))
    assert none == smi.NvlinkStatus() and none.down() == []
    assert smi.parse_nvlink_status(out("h200/nvidia-smi_nvlink_s_i0")) == none


def test_nvlink_command_that_fails_says_so() -> None:
    """h200/nvidia-smi_nvlink_s_bad_index (exit 6); the same words with exit 0 are reported, not dropped."""
    name = "h200/nvidia-smi_nvlink_s_bad_index"
    assert (
        smi.parse_nvlink_status(out(name), rc(name)).problem == "nvidia-smi nvlink -s exited 6: No devices were found"
    )
    assert smi.parse_nvlink_status(out(name)).problem == "nvidia-smi nvlink -s: not understood: No devices were found"


# --- never raise ----------------------------------------------------------------------------------------
ALL_OUTPUTS = sorted(str(p.relative_to(OUTPUTS))[: -len(".out")] for p in OUTPUTS.glob("*/*.out"))


@pytest.mark.parametrize("name", ALL_OUTPUTS)
def test_every_parser_reads_every_real_output_without_raising(name: str) -> None:
    """Any real output, fed to any parser (with and without a failing exit code), gives a result."""
    lines = out(name)
    for code in (0, 1):
        gpu_facts.parse("\n".join(lines), rc=code)
        smi.parse_matrix(lines, rc=code)
        smi.parse_nvlink_status(lines, rc=code)
        smi.parse_error(lines, code)
    smi.parse_driver_module(lines)
    smi.split_rc(lines)
