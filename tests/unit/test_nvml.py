"""vllm_rig/host/nvml.py, NVML through ctypes, against the sandbox's libnvidia-ml stand-in (compiled here from
tests/sandbox/fixtures/nvidia_repo/libnvidia-ml.c, nvml.h's declarations) fed a state file per case. The real
library's answers on an H100: test_facts_nvidia_smi.py (tool_outputs/h100-nvml/)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.fixtures.nvidia_repo import nvml_lib
from vllm_rig.host import nvml

A, B = "00000000:01:00.0", "00000000:02:00.0"
BRIDGE = [f"gpu {A} 25781", f"gpu {B} 25781", *(f"link {g} {n} 1 {(B, A)[g]}" for g in (0, 1) for n in (0, 1))]


@pytest.fixture
def ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """read_links() against the stand-in answering `lines` (its state file under a scratch root)."""
    library = tmp_path / "libnvidia-ml.so.1"
    library.write_bytes(nvml_lib.library())
    monkeypatch.setenv("NVIDIA_STANDIN_ROOT", str(tmp_path))
    state = tmp_path / "var/lib/nvidia-standin/nvml.txt"
    state.parent.mkdir(parents=True)

    def read(*lines: str, load: Any = None) -> nvml.Links:
        state.write_text("".join(line + "\n" for line in lines))
        return nvml.read_links(load or (lambda name: ctypes.CDLL(str(tmp_path / name))))

    return read


def test_two_gpus_joined_by_two_links(ask: Any) -> None:
    links = ask("init 0", *BRIDGE, "topo 30", "p2p 0")
    assert links == nvml.Links(
        topo={"GPU0": {"GPU1": "NV2"}, "GPU1": {"GPU0": "NV2"}},
        p2p={"GPU0": {"GPU1": "OK"}, "GPU1": {"GPU0": "OK"}},
        nvlink={0: [25.781, 25.781], 1: [25.781, 25.781]},
    )


def test_links_not_up_and_the_pcie_path_between(ask: Any) -> None:
    """Every link of both GPUs listed but down: the PCIe ancestor and NVML's P2P refusal in nvidia-smi's words."""
    links = ask(
        "init 0",
        f"gpu {A} 25781",
        f"gpu {B} 25781",
        "link 0 0 0 -",
        "link 0 1 0 -",
        "link 1 0 1 -",
        "link 1 1 0 -",
        "topo 50",
        "p2p 1",
    )
    assert links.topo == {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}}
    assert links.p2p["GPU1"]["GPU0"] == "CNS" and links.nvlink == {0: [None, None], 1: [25.781, None]}
    assert links.nvlink_down == ["GPU0 all links", "GPU1 link 1"] and links.error is None


def test_gpus_without_nvlink_list_no_links(ask: Any) -> None:
    """Every link number NOT_SUPPORTED (the real H100 machine's answer): no links, none down, no speed asked."""
    links = ask("init 0", f"gpu {A} 0", f"gpu {B} 0", "topo 40", "p2p 2")
    assert links.nvlink == {0: [], 1: []} and links.nvlink_down == []
    assert links.topo["GPU0"]["GPU1"] == "NODE" and links.p2p["GPU0"]["GPU1"] == "GNS"


def test_the_version_mismatch_is_nvmls_own_return_code(ask: Any) -> None:
    links = ask("init 18")
    assert links.error == "NVML nvmlInit_v2: Driver/library version mismatch (return code 18)"
    assert ask("init 9") == nvml.Links(error="NVML nvmlInit_v2: Driver Not Loaded (return code 9)")


def test_no_library_is_one_line(ask: Any) -> None:
    def missing(name: str) -> ctypes.CDLL:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    assert ask("init 0", load=missing).error == "libnvidia-ml.so.1 not found: no NVIDIA driver installed"


def test_a_function_the_library_lacks_is_said_not_raised(ask: Any, tmp_path: Path) -> None:
    """An older driver's library (or a stand-in) without one of FUNCTIONS: the reader says which."""

    class Older:
        def __init__(self, path: str) -> None:
            self.lib = ctypes.CDLL(path)

        def __getattr__(self, name: str) -> Any:
            if name == "nvmlDeviceGetFieldValues":
                raise AttributeError(f"undefined symbol: {name}")
            return getattr(self.lib, name)

    links = ask("init 0", *BRIDGE, "topo 30", "p2p 0", load=lambda name: Older(str(tmp_path / name)))
    assert (
        links.error == "libnvidia-ml.so.1 lacks a function NVML documents: undefined symbol: nvmlDeviceGetFieldValues"
    )
