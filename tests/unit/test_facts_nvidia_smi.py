"""The facts that run nvidia-smi, on real outputs (tests/unit/fixtures/tool_outputs/<box>/, each folder's
README says whence). The parsing itself is vllm_rig/host/nvidia_smi.py's, tested in test_host_nvidia_smi.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.unit.gpu_xml import real_xml, rtx_xml
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus, NvidiaTopology

OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"


def _lines(name: str) -> list[str]:
    return (OUTPUTS / f"{name}.out").read_text().splitlines()


def test_gpus_fact_reads_the_real_xml() -> None:
    """h100-xml/nvidia-smi_q_x: one call, BAR1 and the architecture included."""
    result = NvidiaGpus().process(["@@xml", *real_xml("nvidia-smi_q_x").splitlines(), "rc=0"])
    [gpu] = result["gpus"]
    assert (result["rc"], result["error"], result["problem"], result["driver_version"]) == (0, None, None, "580.159.04")
    assert (gpu["index"], gpu["name"], gpu["memory_mib"], gpu["bar1_mib"]) == (
        0,
        "NVIDIA H100 80GB HBM3",
        81559,
        131072,
    )
    assert (gpu["architecture"], gpu["compute_cap"], gpu["pcie_width"], gpu["persistence"]) == (
        "Hopper",
        "9.0",
        16,
        True,
    )
    assert "processes" not in gpu


def test_not_available_link_width_is_none_in_the_fact() -> None:
    """N/A in the link width (a riser): the fact reads it as None instead of stopping the deploy."""
    xml = rtx_xml(gpu0={"pcie_width_current": None, "pcie_width_max": None})
    [gpu, _] = NvidiaGpus().process(["@@xml", *xml.splitlines(), "rc=0"])["gpus"]
    assert (gpu["pcie_width"], gpu["pcie_width_max"], gpu["memory_mib"]) == (None, None, 22528)


def test_version_mismatch_becomes_data() -> None:
    """truenas-580/nvidia-smi_plain: the mismatch, with the NVML library's version kept."""
    out = ["@@xml", *_lines("truenas-580/nvidia-smi_plain"), "rc=18"]
    assert NvidiaGpus().process(out) == {
        "rc": 18,
        "error": "Failed to initialize NVML: Driver/library version mismatch",
        "library_version": "580.178",
        "problem": None,
        "driver_version": None,
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
