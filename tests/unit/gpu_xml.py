"""nvidia-smi's XML for unit tests: the real H100's (tool_outputs/h100-xml/) and two 2080 Ti as the sandbox's
stand-in writes them (tests/sandbox/fixtures/nvidia_repo/standin/smi_xml.py, from NVIDIA's DTD)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.sandbox.fixtures.nvidia_repo.standin import smi_xml
from tests.sandbox.fixtures.nvidia_repo.standin.state import default_state
from vllm_rig.host import gpu_facts

H100_XML = Path(__file__).parent / "fixtures" / "tool_outputs" / "h100-xml"


def real_xml(name: str) -> str:
    return (H100_XML / f"{name}.out").read_text()


def rtx_xml(driver: str = "580.159.03", gpu0: dict[str, Any] | None = None, gpu1: dict[str, Any] | None = None) -> str:
    """Two 2080 Ti on buses 06 and 07, PCIe gen3 x8, 250 W (100-320), persistence on; a None value prints N/A."""
    gpus = default_state()["gpus"]
    for gpu, bus, changes in zip(gpus, ("06", "07"), (gpu0 or {}, gpu1 or {}), strict=True):
        gpu.update(pci_bus_id=f"00000000:{bus}:00.0", pcie_gen_current=3, power_max_w=320.0, persistence_mode=True)
        gpu.update(changes)
    return smi_xml.render(driver, "13.0", 2, [(g, 1, []) for g in gpus], 0.0)


def cards_xml(*cards: tuple[str, int, list[dict[str, Any]]]) -> str:
    """One <gpu> per (bus id, memory used in MiB, processes as {"pid", "name", "used_mib", "type"})."""
    base = default_state()["gpus"][0]
    gpus = [({**base, "pci_bus_id": bus}, used, apps) for bus, used, apps in cards]
    return smi_xml.render("580.159.03", "13.0", len(gpus), gpus, 0.0)


def record(text: str, rc: int = 0, links: Any = None) -> list[str]:
    """The GPU reader's record (vllm_rig/host/gpu_facts.py `record`) for this nvidia-smi output and these links
    (nvml.Links or None), as NvidiaGpus's section reads it."""
    facts = gpu_facts.parse(text, rc)
    return ["@@gpus", json.dumps({**asdict(facts), "links": links and asdict(links)})]
