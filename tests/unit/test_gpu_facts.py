"""vllm_rig/host/gpu_facts.py, the one GPU reader, on a real H100's XML (tool_outputs/h100-xml/, captured
through the device tool) and on the sandbox stand-in's XML, whose elements are checked against NVIDIA's DTD;
and the shared rules (gpu_rules.py) refusing the H100 where a 2080 Ti rig needs Turing."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from tests.unit.gpu_xml import H100_XML, real_xml, rtx_xml
from vllm_rig.host import gpu_facts, gpu_rules


def test_the_real_h100_xml_reads_every_field() -> None:
    facts = gpu_facts.parse(real_xml("nvidia-smi_q_x"))
    assert (facts.driver_version, facts.cuda_version, facts.why_not) == ("580.159.04", "13.0", None)
    [gpu] = facts.gpus
    assert (gpu.index, gpu.name, gpu.bus_id) == (0, "NVIDIA H100 80GB HBM3", "00000000:00:06.0")
    assert gpu.uuid == "GPU-12ffb91a-48b2-3ebe-0105-b0f22ed6897f"
    assert (gpu.architecture, gpu.compute_cap) == ("Hopper", "9.0")  # the torch probe there said (9, 0)
    assert (gpu.memory_mib, gpu.memory_used_mib, gpu.bar1_mib) == (81559, 0, 131072)
    assert (gpu.persistence, gpu.power_limit_w, gpu.power_min_w, gpu.power_max_w) == (True, 700.0, 200.0, 700.0)
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.pcie_width_max) == (5, 16, 16)
    assert (gpu.temperature_c, gpu.sm_clock_mhz, gpu.sm_clock_max_mhz, gpu.processes) == (39.0, 345, 1980, ())


def test_a_real_cuda_process_is_listed_under_its_gpu() -> None:
    [gpu] = gpu_facts.parse(real_xml("nvidia-smi_q_x_cuda_process")).gpus
    assert gpu.processes == (gpu_facts.Process(518, "C", "python3", 1542),) and gpu.memory_used_mib == 1551


def test_failures_are_the_tools_sentence() -> None:
    facts = gpu_facts.parse(real_xml("nvidia-smi_q_x_bad_index"), 6)
    assert facts.gpus == () and facts.why_not == "No devices were found" and not facts.error.mismatch
    mismatch = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178\n"
    error = gpu_facts.parse(mismatch, 18).error
    assert error is not None and error.mismatch and error.library_version == "580.178"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "did not print its XML"),
        ("<nvidia_smi_log><gpu>", "did not print its XML"),
        ("<other/>", "is not <nvidia_smi_log>"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>', "declares entities"),
    ],
)
def test_an_answer_that_is_not_the_xml_is_a_problem_not_a_crash(text: str, said: str) -> None:
    facts = gpu_facts.parse(text)
    assert facts.gpus == () and facts.problem is not None and said in facts.problem


def test_the_stand_ins_xml_reads_as_two_2080_ti() -> None:
    facts = gpu_facts.parse(rtx_xml(gpu0={"pcie_width_current": None}))
    assert [(g.index, g.name, g.compute_cap, g.memory_mib) for g in facts.gpus] == [
        (0, "NVIDIA GeForce RTX 2080 Ti", "7.5", 22528),
        (1, "NVIDIA GeForce RTX 2080 Ti", "7.5", 22528),
    ]
    assert facts.gpus[0].pcie_width is None and facts.gpus[1].pcie_width == 8  # N/A, a riser


# ---- the stand-in against NVIDIA's DTD --------------------------------------------------------------------
def _dtd_children() -> dict[str, list[str]]:
    """Each element's content model from the DTD the 580 driver prints (`nvidia-smi --dtd`), as its children
    in order."""
    text = (H100_XML / "nvsmi_device_v13.dtd").read_text()
    models = re.findall(r"<!ELEMENT\s+(\S+)\s+\(([^>]*)\)[*+?]?\s*>", text)
    return {name: re.findall(r"[A-Za-z_][\w]*", model.replace("#PCDATA", "")) for name, model in models}


def _check(node: ET.Element, model: dict[str, list[str]], path: str) -> list[str]:
    allowed = model.get(node.tag)
    if allowed is None:
        return [f"{path}: <{node.tag}> is not in the DTD"]
    wrong = []
    places = []
    for child in node:
        if child.tag not in allowed:
            wrong.append(f"{path}/{child.tag}: not a child of <{node.tag}> in the DTD")
        else:
            places.append(allowed.index(child.tag))
        wrong += _check(child, model, f"{path}/{child.tag}")
    if places != sorted(places):
        wrong.append(f"{path}: children out of the DTD's order")
    return wrong


def test_the_stand_ins_xml_follows_the_dtd_and_the_real_xml_does_too() -> None:
    model = _dtd_children()
    stand_in = ET.fromstring(rtx_xml())
    assert _check(stand_in, model, "nvidia_smi_log") == []
    # The check is sound: the real XML's every element sits where the DTD allows it (its order strays from
    # the DTD in one place, ecc_errors/volatile, which the stand-in does not write).
    real = _check(ET.fromstring(real_xml("nvidia-smi_q_x")), model, "nvidia_smi_log")
    assert [line for line in real if "out of the DTD's order" not in line] == []
    broken = ET.fromstring(rtx_xml())
    ET.SubElement(broken.find("gpu/pci"), "compute_cap")  # an element the DTD does not have: found
    assert "nvidia_smi_log/gpu/pci/compute_cap: not a child of <pci> in the DTD" in _check(
        broken, model, "nvidia_smi_log"
    )


# ---- the rules, shared by preflight and the verdict ----------------------------------------------------
def test_the_rules_refuse_an_h100_for_a_2080_ti_rig_and_say_why() -> None:
    """The H100 has memory enough, but it is no Turing card: the SM75 runtime is not built for it."""
    [h100] = gpu_facts.parse(real_xml("nvidia-smi_q_x")).gpus
    gpu = {
        "index": h100.index,
        "memory_mib": h100.memory_mib,
        "compute_cap": h100.compute_cap,
        "architecture": "Hopper",
    }
    assert gpu_rules.memory_problem(gpu, 22000) is None
    assert gpu_rules.capability_problem(gpu, "7.5") == "compute capability 9.0 (Hopper)"
    assert gpu_rules.capability_problem(gpu, "9.0") is None
    ampere = {"compute_cap": None, "architecture": "Ampere"}
    assert gpu_rules.capability_problem(ampere, "8.6") is None  # 8.0 or 8.6: the XML cannot tell
    assert gpu_rules.capability_problem(ampere, "7.5") == "GPU architecture Ampere, not Turing (compute capability 7.5)"
    assert gpu_rules.capability_problem({}, "7.5").startswith("compute capability not reported")
