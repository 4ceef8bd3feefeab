"""The facts that run nvidia-smi, on real outputs (tests/unit/fixtures/tool_outputs/<box>/, each folder's
README says whence). The parsing itself is vllm_rig/host/nvidia_smi.py's, tested in test_host_nvidia_smi.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.unit.test_host_nvidia_smi import CAPTURED_FIELDS
from vllm_rig.stages.preflight.gpu_facts import GPU_FIELDS, NvidiaGpus, NvidiaTopology

OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"


def _lines(name: str) -> list[str]:
    return (OUTPUTS / f"{name}.out").read_text().splitlines()


def _fact_query_line(line: str) -> str:
    """The H200's captured row, cut down to the fields the fact asks for, in its order."""
    row = dict(zip(CAPTURED_FIELDS, [c.strip() for c in line.split(",")], strict=True))
    return ", ".join(row[f] for f in GPU_FIELDS)


def test_gpus_fact_adds_bar1_from_the_memory_report() -> None:
    """h200/nvidia-smi_query_noheader_nounits and h200/nvidia-smi_q_memory."""
    line = _fact_query_line(_lines("h200/nvidia-smi_query_noheader_nounits")[0])
    out = ["@@query", line, "rc=0", "@@memory", *_lines("h200/nvidia-smi_q_memory")]
    result = NvidiaGpus().process(out)
    [gpu] = result["gpus"]
    assert result["rc"] == 0 and result["error"] is None and result["problem"] is None
    assert gpu == {
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-f0f9f763-1b99-6737-76cb-3fd72b1216d3",
        "memory_mib": 143771,
        "compute_cap": "9.0",
        "driver_version": "580.159.04",
        "persistence": True,
        "power_limit_w": 700.0,
        "power_min_w": 200.0,
        "power_max_w": 700.0,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "bus_id": "00000000:00:06.0",
        "bar1_mib": 262144,
    }


def test_not_available_link_width_is_none_in_the_fact() -> None:
    """The H200's row with [N/A] in the link-width columns (as h200/nvidia-smi_query_na shows [N/A] in a
    numeric column): the fact reads it as None instead of stopping the deploy."""
    line = _fact_query_line(_lines("h200/nvidia-smi_query_noheader_nounits")[0]).replace(", 16, 16,", ", [N/A], [N/A],")
    [gpu] = NvidiaGpus().process(["@@query", line, "rc=0", "@@memory"])["gpus"]
    assert (gpu["pcie_width"], gpu["pcie_width_max"], gpu["memory_mib"]) == (None, None, 143771)


def test_version_mismatch_becomes_data() -> None:
    """truenas-580/nvidia-smi_plain: the mismatch, with the NVML library's version kept."""
    out = [
        "@@query",
        *_lines("truenas-580/nvidia-smi_plain"),
        "rc=18",
        "@@memory",
        *_lines("truenas-580/nvidia-smi_plain"),
    ]
    assert NvidiaGpus().process(out) == {
        "rc": 18,
        "error": "Failed to initialize NVML: Driver/library version mismatch",
        "library_version": "580.178",
        "problem": None,
        "gpus": [],
    }


def test_topology_fact_reads_three_commands_in_one() -> None:
    """rtx5090/nvidia-smi_topo_m, rtx5090/nvidia-smi_topo_p2p_rw and rtx2080ti/nvidia-smi_nvlink_status_i2."""
    fact = NvidiaTopology()
    assert fact.command().count("nvidia-smi") == 3
    out = ["@@-m", *_lines("rtx5090/nvidia-smi_topo_m"), "rc=0", "@@rw", *_lines("rtx5090/nvidia-smi_topo_p2p_rw")]
    out += ["rc=0", "@@-s", *_lines("rtx2080ti/nvidia-smi_nvlink_status_i2"), "rc=0"]
    result = fact.process(out)
    assert (result["rc"], result["error"], result["problems"]) == (0, None, {})
    assert result["topo"]["GPU1"]["GPU0"] == "PHB" and result["p2p"]["GPU1"]["GPU0"] == "GNS"
    assert result["nvlink"] == {2: [25.781, 25.781]} and result["nvlink_down"] == []


def test_topology_fact_names_the_command_that_failed() -> None:
    """h200/nvidia-smi_topo_m_bad_index (exit 6) and b200/nvidia-smi_nvlink_s (all links inactive)."""
    out = [
        "@@-m",
        *_lines("h200/nvidia-smi_topo_m_bad_index"),
        "rc=6",
        "@@rw",
        *_lines("rtx5090/nvidia-smi_topo_p2p_rw"),
    ]
    out += ["rc=0", "@@-s", *_lines("b200/nvidia-smi_nvlink_s"), "rc=0"]
    result = NvidiaTopology().process(out)
    assert (result["rc"], result["error"]) == (6, "No devices were found")
    assert result["problems"] == {"topo -m": "nvidia-smi topo -m exited 6: No devices were found"}
    assert result["topo"] == {} and result["nvlink_down"] == ["GPU2 all links"]


def test_a_failing_nvidia_smi_is_data_and_the_command_exits_0(tmp_path: Path) -> None:
    """The facts' own commands, run by the real sh with a PATH that has sh but no nvidia-smi: each call's
    exit status comes back as rc=127 with the shell's error line, and the command itself exits 0 (pyinfra
    would fail a host on a non-zero exit)."""
    (tmp_path / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    for fact in (NvidiaGpus(), NvidiaTopology()):
        run = subprocess.run(
            fact.command(), shell=True, env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, run.stderr
        result = fact.process(run.stdout.splitlines())
        assert result is not None and result["rc"] == 127 and "nvidia-smi" in (result["error"] or "")
        if isinstance(fact, NvidiaGpus):
            assert result["gpus"] == [] and result["problem"] is None


def test_a_missing_topology_section_reads_as_not_run() -> None:
    """A section cut off (no `@@rw` at all) is exit 127 for that command, named in problems."""
    out = ["@@-m", *_lines("rtx5090/nvidia-smi_topo_m"), "rc=0", "@@-s", *_lines("b200/nvidia-smi_nvlink_s"), "rc=0"]
    result = NvidiaTopology().process(out)
    assert result is not None and result["rc"] == 127
    assert list(result["problems"]) == ["topo -p2p rw"] and result["topo"]["GPU1"]["GPU0"] == "PHB"


def test_a_failed_host_gets_none_from_both_facts() -> None:
    """What pyinfra hands callers when the host failed or nvidia-smi is absent: preflight reads None as
    'not installed yet'."""
    assert NvidiaGpus.default() is None and NvidiaTopology.default() is None
