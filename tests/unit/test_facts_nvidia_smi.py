"""The fact that reads the GPUs and their links: the host package's reader run from stdin, its record read
back here; on the real record of an H100 (tests/unit/fixtures/tool_outputs/h100-nvml/) and on real nvidia-smi
outputs (each folder's README says whence). The reader's parts: test_host_nvidia_smi.py, test_nvml.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit.gpu_xml import real_xml, record, rtx_xml
from vllm_rig.host import nvml
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus, reader_stdin

OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"


def test_the_real_record_of_an_h100_is_read() -> None:
    """h100-nvml/gpu_facts.json: the reader run for real (XML and NVML); NVML said no NVLink on any link."""
    lines = (OUTPUTS / "h100-nvml" / "gpu_facts.json").read_text().splitlines()
    result = NvidiaGpus().process(["@@gpus", *lines])
    [gpu] = result["gpus"]
    assert (result["rc"], result["error"], result["problem"], result["driver_version"]) == (0, None, None, "580.159.04")
    assert (gpu["name"], gpu["memory_mib"], gpu["compute_cap"], gpu["bar1_mib"]) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        "9.0",
        131072,
    )
    assert "processes" not in gpu
    assert result["links"] == {"error": None, "topo": {}, "p2p": {}, "nvlink": {0: []}, "nvlink_down": []}


def test_the_xml_and_the_links_come_back_as_the_host_read_them() -> None:
    """h100-xml/nvidia-smi_q_x through the record, and two 2080 Ti's links with integer GPU keys again."""
    [gpu] = NvidiaGpus().process(record(real_xml("nvidia-smi_q_x")))["gpus"]
    assert (gpu["architecture"], gpu["pcie_width"], gpu["persistence"]) == ("Hopper", 16, True)
    links = nvml.Links(topo={"GPU0": {"GPU1": "NV2"}}, nvlink={0: [25.781, None]}, nvlink_down=["GPU0 link 1"])
    result = NvidiaGpus().process(record(rtx_xml(gpu0={"pcie_width_current": None}), links=links))
    assert result["gpus"][0]["pcie_width"] is None and result["gpus"][0]["memory_mib"] == 22528
    assert result["links"] and result["links"]["nvlink"] == {0: [25.781, None]}
    assert result["links"]["nvlink_down"] == ["GPU0 link 1"] and result["links"]["topo"]["GPU0"]["GPU1"] == "NV2"


def test_version_mismatch_becomes_data() -> None:
    """truenas-580/nvidia-smi_plain: the mismatch, with the NVML library's version kept."""
    text = (OUTPUTS / "truenas-580" / "nvidia-smi_plain.out").read_text()
    assert NvidiaGpus().process(record(text, 18)) == {
        "rc": 18,
        "error": "Failed to initialize NVML: Driver/library version mismatch",
        "library_version": "580.178",
        "problem": None,
        "driver_version": None,
        "gpus": [],
        "links": None,
    }


def test_the_command_runs_the_reader_from_stdin_and_exits_0(tmp_path: Path) -> None:
    """The fact's own command, run by the real sh with the zip on stdin and a PATH with python3 but no
    nvidia-smi: the reader reads its stdin (pyinfra fails a host whose command leaves stdin unread), says so
    (exit 127), the fact is None ("not installed yet") and the command itself exits 0 (pyinfra would fail a
    host on a non-zero exit)."""
    for tool, path in (("sh", shutil.which("sh") or "/bin/sh"), ("python3", sys.executable)):
        (tmp_path / tool).symlink_to(path)
    fact = NvidiaGpus()
    run = subprocess.run(
        fact.command(),
        shell=True,
        env={"PATH": str(tmp_path)},
        input="".join(reader_stdin().readlines()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert '"rc": 127' in run.stdout and "nvidia-smi not found" in run.stdout
    assert fact.process(run.stdout.splitlines()) is None


def test_an_answer_that_is_not_the_record_is_a_problem() -> None:
    """No python3 on the box, or a record cut off: one line quoting what the host printed."""
    for said in (["sh: 1: python3: not found"], ['{"driver_version": "580"']):
        result = NvidiaGpus().process(["@@gpus", *said])
        assert result["rc"] == 0 and result["gpus"] == [] and result["links"] is None
        assert (result["problem"] or "").startswith("the GPU reader's answer was not understood")
        assert said[0] in (result["problem"] or "")
    bad = '{"driver_version": null, "cuda_version": null, "error": null, "problem": null, "gpus": [{"index": [1]}]}'
    assert "not a number or a word" in (NvidiaGpus().process(["@@gpus", bad])["problem"] or "")


def test_a_failed_host_gets_none() -> None:
    """What pyinfra hands callers when the host failed or nvidia-smi is absent: preflight reads None as
    'not installed yet'."""
    assert NvidiaGpus.default() is None
