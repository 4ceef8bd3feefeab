"""vllm_rig/host/gpu_verdict.py: the gate logic on real nvidia-smi outputs (tests/unit/fixtures/tool_outputs/)
and on two-GPU NVLink shapes, with nvidia-smi and the torch measurements faked (test_host_package.py runs it
from the zip). Its parsing is vllm_rig/host/nvidia_smi.py's (test_host_nvidia_smi.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.gpu_xml import real_xml, rtx_xml
from vllm_rig.host import gpu_facts, nvml
from vllm_rig.host import gpu_verdict as gv

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = ROOT / "tests" / "unit" / "fixtures" / "tool_outputs"
H200 = OUTPUTS / "h200"
XML = gpu_facts.COMMAND
NVML = ("nvml",)  # the links NVML answers (vllm_rig/host/nvml.py, tested in test_nvml.py), beside the commands


def _real(name: str) -> list[str]:
    return (H200 / f"{name}.out").read_text().splitlines()


def _real_result(name: str) -> Any:
    return gv.ToolResult(int((H200 / f"{name}.rc").read_text()), _real(name))


# One real H100's XML (h100-xml/) and the links NVML gave on the real one-H100 machine (h100-nvml/): no peer.
H100_LINKS = gpu_facts.from_record((OUTPUTS / "h100-nvml" / "gpu_facts.json").read_text().splitlines())[1]
H200_OUTPUTS = {XML: gv.ToolResult(0, real_xml("nvidia-smi_q_x").splitlines()), NVML: H100_LINKS}

# Two 2080 Ti with a bridge: the sandbox stand-in's XML (tests/unit/gpu_xml.py).
RTX_XML = rtx_xml()
PAIR = {"GPU0": {"GPU1": "NV2"}, "GPU1": {"GPU0": "NV2"}}
RTX_LINKS = nvml.Links(
    topo=PAIR,
    p2p={"GPU0": {"GPU1": "OK"}, "GPU1": {"GPU0": "OK"}},
    nvlink={0: [25.781, 25.781], 1: [25.781, 25.781]},
)
RTX_OUTPUTS = {XML: gv.ToolResult(0, RTX_XML.splitlines()), NVML: RTX_LINKS}
RIG = [
    "--expect-gpus",
    "2",
    "--driver-version",
    "580.159.03",
    "--min-memory-mib",
    "22000",
    "--compute-cap",
    "7.5",
    "--power-limit-w",
    "250",
    "--min-p2p-gbps",
    "35",
    "--min-allreduce-gbps",
    "30",
]


def _curve(plateau: float) -> list[dict[str, Any]]:
    """An all-reduce curve that rises and flattens at `plateau` GB/s from 64 MiB up."""
    sizes = [2**20 * 2**k for k in range(9)]
    return [{"bytes": s, "busbw_gbps": round(plateau * min(1.0, (k + 1) / 7), 2)} for k, s in enumerate(sizes)]


class FakeProbe:
    """torch as the script sees it: device info, peer access and the two measuring jobs."""

    def __init__(
        self,
        devices: int,
        capability: str = "7.5",
        error: str | None = None,
        peer: bool = True,
        p2p: dict[str, Any] | None = None,
        allreduce: dict[str, Any] | None = None,
    ) -> None:
        self.devices, self.capability, self.error, self.peer = devices, capability, error, peer
        self.p2p = p2p or {"0->1": _copy(42.0), "1->0": _copy(41.5)}
        self.allreduce_result = allreduce or {"correct": True, "sizes": _curve(38.0), "transports": ["P2P/IPC"]}
        self.calls: list[tuple] = []

    def info(self) -> dict[str, Any]:
        devices = [{"name": "NVIDIA GeForce RTX 2080 Ti", "capability": self.capability}] * self.devices
        return {
            "version": "2.11.0+cu128",
            "cuda": "12.8",
            "nccl": "2.27.3",
            "error": self.error,
            "devices": [] if self.error else devices,
        }

    def peer_access(self, src: int, dst: int) -> bool:
        return self.peer

    def p2p_bandwidth(self, pairs: list, mib: int, iters: int, timeout: float) -> dict[str, Any]:
        self.calls.append(("p2p", pairs, mib, iters))
        return self.p2p

    def allreduce(self, devices: list[int], sizes: tuple, iters: int, timeout: float) -> dict[str, Any]:
        self.calls.append(("allreduce", devices, sizes, iters))
        return dict(self.allreduce_result)


def _copy(gbps: float, verified: bool = True) -> dict[str, Any]:
    return {"gbps": gbps, "bytes": 256 * 2**20, "iters": 10, "verified": verified}


def _runner(outputs: dict[tuple, Any]) -> Any:
    def run(argv: tuple[str, ...]) -> Any:
        return outputs[argv]

    return run


def _links(outputs: dict[tuple, Any]) -> Any:
    return lambda: outputs[NVML]


def verdict(
    outputs: dict[tuple, Any],
    probe: Any,
    args: list[str],
    capsys: pytest.CaptureFixture,
    which: Any = lambda name: f"/usr/bin/{name}",
) -> tuple[int, dict[str, Any]]:
    """Run main() with --json; return the exit code and the one JSON object it printed."""

    def load() -> Any:
        if isinstance(probe, Exception):
            raise probe
        return probe

    rc = gv.main(["--json", *args], run=_runner(outputs), load_probe=load, which=which, read_links=_links(outputs))
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out  # one JSON object, one line
    data = json.loads(out)
    assert data["exit_code"] == rc
    return rc, data


def gates(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in data["gates"]}


# --- parsing (the shared parser's results, as the report keeps them) ----------------------------------
def test_report_keeps_every_field_of_the_real_h100() -> None:
    view = gv.collect_smi(_runner(H200_OUTPUTS), which=lambda n: n, read_links=_links(H200_OUTPUTS))
    [gpu] = view.gpus
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["memory_mib"] == 81559 and gpu["memory_used_mib"] == 0
    assert (gpu["compute_cap"], view.driver_version, gpu["persistence"]) == ("9.0", "580.159.04", True)
    assert (gpu["power_limit_w"], gpu["power_min_w"], gpu["power_max_w"]) == (700.0, 200.0, 700.0)
    assert (gpu["pcie_width"], gpu["pcie_width_max"], gpu["pcie_gen"], gpu["bar1_mib"]) == (16, 16, 5, 131072)
    assert view.notes == [] and view.error is None


def test_xml_with_not_available_cells_still_parses(capsys: pytest.CaptureFixture) -> None:
    """N/A where a riser hides the link width and the power limit: no crash, None."""
    xml = rtx_xml(gpu0={"pcie_width_current": None, "power_limit_w": None})
    _, data = verdict({**RTX_OUTPUTS, XML: gv.ToolResult(0, xml.splitlines())}, FakeProbe(devices=2), RIG, capsys)
    assert data["gpus"][0]["pcie_width"] is None and data["gpus"][0]["power_limit_w"] is None
    assert data["gpus"][0]["memory_mib"] == 22528 and gates(data)["power_limit_w"]["result"] == "warn"


def test_an_answer_that_is_not_the_xml_is_could_not_run(capsys: pytest.CaptureFixture) -> None:
    outputs = {**RTX_OUTPUTS, XML: gv.ToolResult(0, RTX_XML.splitlines()[:9])}  # cut off mid-way
    rc, data = verdict(outputs, FakeProbe(devices=2), RIG, capsys)
    assert rc == 2 and data["problems"][0].startswith("nvidia-smi -q -x did not print its XML")


def test_plateau_is_the_median_of_the_largest_sizes() -> None:
    sizes = [{"bytes": 2**20 * k, "busbw_gbps": v} for k, v in ((1, 3.0), (64, 36.0), (128, 44.0), (256, 38.0))]
    assert gv.plateau(sizes) == 38.0
    assert gv.plateau([]) is None


def test_nccl_transports_from_info_lines(tmp_path: Path) -> None:
    (tmp_path / "nccl.11.log").write_text(
        "host:11:30 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
        "host:11:30 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\n"
        "host:11:30 [0] NCCL INFO Connected all rings\n"
    )
    (tmp_path / "nccl.12.log").write_text(
        "host:12:31 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n"
    )
    assert gv.nccl_transports(sorted(tmp_path.glob("nccl.*.log"))) == ["P2P/IPC", "SHM/direct/direct"]


def test_nccl_transports_read_the_shared_memory_lines_without_a_slash_n() -> None:
    """nccl-shm/ (issue 36): real SHM lines print "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", no "/N";
    beside NET lines with it, and an older NCCL's bus-id ranks."""
    real = Path(__file__).parent / "fixtures" / "tool_outputs" / "nccl-shm"
    assert gv.nccl_transports([real / "nccl-1609_info.out"]) == ["SHM/direct/direct"]
    assert gv.nccl_transports([real / "nccl-tests-166_info.out"]) == ["NET/Socket/0", "SHM/direct/direct"]
    assert gv.nccl_transports([real / "code-search-busid_info.out"]) == ["SHM/direct/direct"]


# --- one GPU (the real H200 box) -------------------------------------------------------------------------
def test_single_gpu_passes_and_says_not_applicable(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=1, capability="9.0")
    args = ["--expect-gpus", "1", "--driver-version", "580.159.04", "--min-memory-mib", "22000"]
    rc, data = verdict(H200_OUTPUTS, probe, [*args, "--compute-cap", "9.0", "--min-p2p-gbps", "35"], capsys)
    assert rc == 0 and data["verdict"] == "pass" and data["problems"] == []
    g = gates(data)
    assert g["gpu_count"]["result"] == "pass" and g["gpu_count"]["measured"] == 1
    assert g["gpu_memory_mib"] == {
        "name": "gpu_memory_mib",
        "measured": [81559],
        "threshold": 22000,
        "result": "pass",
        "fatal": True,
        "detail": "",
    }
    for name in ("p2p_copy_gbps", "allreduce_busbw_gbps", "nvlink", "p2p_grant", "peer_access"):
        assert g[name]["result"] == "not applicable", name
    assert data["p2p_bandwidth"] == data["allreduce"] == data["peer_access"] == "not applicable"
    assert data["gpus"][0]["bar1_mib"] == 131072 and data["driver_version"] == "580.159.04"
    assert probe.calls == []  # nothing to measure between GPUs


def test_single_gpu_against_the_rigs_settings_fails_the_right_gates(capsys: pytest.CaptureFixture) -> None:
    rc, data = verdict(H200_OUTPUTS, FakeProbe(devices=1, capability="9.0"), RIG, capsys)
    assert rc == 1 and data["verdict"] == "fail"
    g = gates(data)
    assert {n for n, v in g.items() if v["result"] == "fail"} == {"gpu_count", "compute_capability", "driver_version"}
    assert g["driver_version"]["measured"] == "580.159.04" and g["driver_version"]["threshold"] == "580.159.03"
    assert g["power_limit_w"]["result"] == "warn" and g["power_limit_w"]["fatal"] is False  # 700 W, not 250
    assert g["p2p_copy_gbps"]["result"] == "not applicable"


def test_every_gate_names_its_threshold_and_result(capsys: pytest.CaptureFixture) -> None:
    _, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2), RIG, capsys)
    assert len(data["gates"]) == 11
    for g in data["gates"]:
        assert set(g) == {"name", "measured", "threshold", "result", "fatal", "detail"}
        assert g["result"] in ("pass", "fail", "warn", "not applicable", "not checked", "skipped", "not measured")


# --- two GPUs --------------------------------------------------------------------------------------------
def test_healthy_two_gpu_rig_passes(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=2)
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    assert rc == 0 and data["verdict"] == "pass", data
    assert {g["name"] for g in data["gates"] if g["result"] != "pass"} == set()
    g = gates(data)
    assert g["p2p_copy_gbps"]["measured"] == {"0->1": 42.0, "1->0": 41.5} and g["p2p_copy_gbps"]["threshold"] == 35
    assert g["allreduce_busbw_gbps"]["measured"] == 38.0 and data["allreduce"]["plateau_busbw_gbps"] == 38.0
    assert g["nvlink"]["measured"] == {"GPU0-GPU1": "NV2"} and data["nvlink"] == {"0": [25.781] * 2, "1": [25.781] * 2}
    assert data["peer_access"] == {"0->1": True, "1->0": True}
    p2p_call, allreduce_call = probe.calls
    assert p2p_call == ("p2p", [(0, 1), (1, 0)], 256, gv.P2P_ITERS)
    assert allreduce_call[1] == [0, 1] and allreduce_call[2][0] == 2**20 and allreduce_call[2][-1] == 256 * 2**20


def test_slow_direction_fails_the_p2p_gate(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=2, p2p={"0->1": _copy(42.0), "1->0": _copy(11.8)})
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    g = gates(data)["p2p_copy_gbps"]
    assert rc == 1 and g["result"] == "fail" and g["detail"] == "slowest 11.8 GB/s"


def test_low_allreduce_plateau_fails(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=2, allreduce={"correct": True, "sizes": _curve(21.0), "transports": ["SHM/direct"]})
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    g = gates(data)["allreduce_busbw_gbps"]
    assert rc == 1 and (g["measured"], g["threshold"], g["result"]) == (21.0, 30, "fail")


def test_allreduce_hang_is_a_failure_not_a_crash(capsys: pytest.CaptureFixture) -> None:
    hang = {"error": "no answer after 60 s: a hang (ACS/IOMMU on the P2P path?)", "timed_out": True}
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2, allreduce=hang), RIG, capsys)
    g = gates(data)["allreduce_busbw_gbps"]
    assert rc == 1 and g["result"] == "fail" and "a hang" in g["detail"] and data["problems"] == []


def test_corrupted_copy_or_wrong_sum_fails(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=2, p2p={"0->1": _copy(42.0, verified=False), "1->0": _copy(42.0)})
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    assert rc == 1 and gates(data)["p2p_copy_gbps"]["detail"] == "0->1: copied data differ"
    wrong = {"correct": False, "sizes": _curve(38.0), "transports": []}
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2, allreduce=wrong), RIG, capsys)
    assert rc == 1 and gates(data)["allreduce_busbw_gbps"]["detail"] == "all-reduce returned a wrong sum"


OOM = "OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB"


def test_memory_held_by_the_server_is_could_not_run(capsys: pytest.CaptureFixture) -> None:
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2, allreduce={"error": OOM}), RIG, capsys)
    assert rc == 2 and data["verdict"] == "could not run"
    hint = " (memory in use: GPU0 1 MiB, GPU1 1 MiB; stop the vLLM service)"
    assert data["problems"] == [f"all-reduce could not run: {OOM}{hint}"]
    assert gates(data)["allreduce_busbw_gbps"]["result"] == "not measured"
    probe = FakeProbe(devices=2, p2p={"0->1": {"error": OOM}, "1->0": _copy(42.0)})
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    assert rc == 2 and data["problems"][0].startswith("P2P copy could not run: OutOfMemoryError")
    assert gates(data)["p2p_copy_gbps"]["result"] == "not measured"


def test_cuda_or_nccl_error_on_the_link_is_a_failure(capsys: pytest.CaptureFixture) -> None:
    nccl = {"error": "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error"}
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2, allreduce=nccl), RIG, capsys)
    g = gates(data)["allreduce_busbw_gbps"]
    assert rc == 1 and g["result"] == "fail" and "unhandled cuda error" in g["detail"] and data["problems"] == []
    probe = FakeProbe(devices=2, p2p={"0->1": {"error": "AcceleratorError: CUDA error: an illegal memory access"}})
    rc, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    assert (
        rc == 1
        and gates(data)["p2p_copy_gbps"]["detail"] == "0->1: AcceleratorError: CUDA error: an illegal memory access"
    )


def test_skip_bandwidth_measures_nothing_but_checks_peer_access(capsys: pytest.CaptureFixture) -> None:
    probe = FakeProbe(devices=2, peer=False)
    rc, data = verdict(RTX_OUTPUTS, probe, [*RIG, "--skip-bandwidth"], capsys)
    g = gates(data)
    assert rc == 0 and probe.calls == []
    assert g["p2p_copy_gbps"]["result"] == g["allreduce_busbw_gbps"]["result"] == "skipped"
    assert g["peer_access"]["result"] == "warn" and g["peer_access"]["measured"] == {"0->1": False, "1->0": False}


def test_thresholds_unset_report_figures_without_judging(capsys: pytest.CaptureFixture) -> None:
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2), [], capsys)
    g = gates(data)
    assert rc == 0 and g["gpu_count"]["threshold"] == ">= 1"
    assert g["p2p_copy_gbps"]["result"] == "not checked" and g["p2p_copy_gbps"]["detail"] == "slowest 41.5 GB/s"
    assert g["allreduce_busbw_gbps"]["measured"] == 38.0 and g["allreduce_busbw_gbps"]["result"] == "not checked"


def test_pcie_only_box_warns_but_is_judged_by_bandwidth(capsys: pytest.CaptureFixture) -> None:
    links = nvml.Links(
        topo={"GPU0": {"GPU1": "PHB"}, "GPU1": {"GPU0": "PHB"}}, p2p={"GPU0": {"GPU1": "CNS"}, "GPU1": {"GPU0": "CNS"}}
    )
    xml = rtx_xml(
        gpu0={"persistence_mode": False, "power_limit_w": 300.0},
        gpu1={"persistence_mode": False, "power_limit_w": 300.0},
    )
    outputs = {
        **RTX_OUTPUTS,
        NVML: links,
        XML: gv.ToolResult(0, xml.splitlines()),
    }
    rc, data = verdict(outputs, FakeProbe(devices=2), RIG, capsys)
    g = gates(data)
    assert rc == 0
    assert {n for n, v in g.items() if v["result"] == "warn"} == {
        "nvlink",
        "p2p_grant",
        "persistence_mode",
        "power_limit_w",
    }
    assert g["p2p_grant"]["measured"] == {"GPU0-GPU1": "CNS"} and g["power_limit_w"]["measured"] == [300.0, 300.0]


def test_many_equal_links_read_short() -> None:
    assert gv._speeds([26.562] * 18) == "all 26.562 GB/s"
    assert gv._speeds([25.781, None]) == "25.781 GB/s, inactive" and gv._speeds([]) == "none"


def _rtx_links(**changes: Any) -> dict[tuple, Any]:
    return {**RTX_OUTPUTS, NVML: nvml.Links(**{**RTX_LINKS.__dict__, **changes})}


def test_inactive_nvlink_warns(capsys: pytest.CaptureFixture) -> None:
    outputs = _rtx_links(nvlink={0: [25.781] * 2, 1: [25.781, None]}, nvlink_down=["GPU1 link 1"])
    _, data = verdict(outputs, FakeProbe(devices=2), RIG, capsys)
    assert gates(data)["nvlink"]["result"] == "warn" and gates(data)["nvlink"]["detail"] == "GPU1 link 1 inactive"
    assert data["nvlink_down"] == ["GPU1 link 1"]


def test_all_links_inactive_names_the_bridge_as_down(capsys: pytest.CaptureFixture) -> None:
    """A GPU whose NVLinks NVML lists, none of them up (a bridge missing or not seated)."""
    outputs = _rtx_links(
        topo={"GPU0": {"GPU1": "PHB"}, "GPU1": {"GPU0": "PHB"}},
        nvlink={0: [None, None], 1: [None, None]},
        nvlink_down=["GPU0 all links", "GPU1 all links"],
    )
    load = FakeProbe(devices=2)
    _, data = verdict(outputs, load, RIG, capsys)
    nvlink = gates(data)["nvlink"]
    assert nvlink["result"] == "warn" and nvlink["detail"] == (
        "GPU0, GPU1: NVML says all links are inactive: the NVLink bridge is down (missing or not seated)"
    )
    gv.main(RIG, run=_runner(outputs), load_probe=lambda: load, which=lambda n: n, read_links=_links(outputs))
    assert "  NVLink GPU1: all links inactive (NVML: the bridge is down or missing)" in capsys.readouterr().out


def test_links_nvml_could_not_read_are_a_note_not_silence(capsys: pytest.CaptureFixture) -> None:
    outputs = {**RTX_OUTPUTS, NVML: nvml.Links(error="NVML nvmlDeviceGetP2PStatus: Unknown Error (return code 999)")}
    _, data = verdict(outputs, FakeProbe(devices=2), RIG, capsys)
    assert data["notes"] == ["NVML nvmlDeviceGetP2PStatus: Unknown Error (return code 999)"]
    assert data["topology"] == {} and gates(data)["nvlink"]["result"] == "warn"


# --- could not run --------------------------------------------------------------------------------------
def test_no_nvidia_smi(capsys: pytest.CaptureFixture) -> None:
    rc, data = verdict(
        {}, FakeProbe(devices=0, error="CUDA unusable: RuntimeError: no driver"), RIG, capsys, which=lambda n: None
    )
    assert rc == 2 and data["problems"][0].startswith("nvidia-smi not found")
    assert gates(data)["gpu_count"]["result"] == "not measured"


def _box(name: str, rc: int = 0) -> Any:
    """A real output of another box (tests/unit/fixtures/tool_outputs/<box>/<name>.out, README: whence)."""
    return gv.ToolResult(rc, (OUTPUTS / f"{name}.out").read_text().splitlines())


def test_nvml_mismatch_is_could_not_run_and_names_both_versions(capsys: pytest.CaptureFixture) -> None:
    """Case 4: truenas-580/nvidia-smi_plain (NVML library 580.178) and its proc_driver_nvidia_version
    (the proprietary module 580.173.02)."""
    outputs = {
        XML: _box("truenas-580/nvidia-smi_plain", 18),
        gv.MODULE_VERSION: _box("truenas-580/proc_driver_nvidia_version"),
    }
    error = "CUDA unusable: RuntimeError: CUDA driver initialization failed"
    rc, data = verdict(outputs, FakeProbe(devices=0, error=error), RIG, capsys)
    assert rc == 2
    assert data["problems"] == [
        "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch "
        "(NVML library 580.178, loaded module 580.173.02 (proprietary))",
        error,
    ]
    # No module loaded (the file is not there): the library's version alone.
    outputs[gv.MODULE_VERSION] = gv.ToolResult(1, [], ["cat: /proc/driver/nvidia/version: No such file or directory"])
    _, data = verdict(outputs, FakeProbe(devices=0, error=error), RIG, capsys)
    assert data["problems"][0].endswith("version mismatch (NVML library 580.178)")


def test_other_nvidia_smi_failures_say_its_sentence(capsys: pytest.CaptureFixture) -> None:
    """h100-xml/nvidia-smi_q_x_bad_index: not a mismatch, so no module version is read."""
    outputs = {XML: gv.ToolResult(6, real_xml("nvidia-smi_q_x_bad_index").splitlines())}
    rc, data = verdict(outputs, FakeProbe(devices=0, error="CUDA unusable: x"), RIG, capsys)
    assert rc == 2 and data["problems"][0] == "nvidia-smi failed: No devices were found"


def test_no_torch_is_could_not_run_unless_a_gate_already_failed(capsys: pytest.CaptureFixture) -> None:
    missing = ImportError("No module named 'torch'")
    rc, data = verdict(RTX_OUTPUTS, missing, RIG, capsys)
    assert rc == 2 and "torch not importable" in data["problems"][0] and data["torch"] is None
    g = gates(data)
    assert g["driver_version"]["result"] == "pass" and g["p2p_copy_gbps"]["result"] == "not measured"
    rc, data = verdict(H200_OUTPUTS, missing, RIG, capsys)  # one GPU where two are expected: a verdict
    assert rc == 1 and gates(data)["gpu_count"]["result"] == "fail"


def test_cuda_unusable(capsys: pytest.CaptureFixture) -> None:
    error = "CUDA unusable: RuntimeError: Found no NVIDIA driver on your system."
    rc, data = verdict(RTX_OUTPUTS, FakeProbe(devices=2, error=error), RIG, capsys)
    assert rc == 2 and data["problems"] == [error] and data["peer_access"] == "not measured"


def test_torch_seeing_one_of_two_gpus_is_noted_and_not_measured(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    probe = FakeProbe(devices=1)
    _, data = verdict(RTX_OUTPUTS, probe, RIG, capsys)
    assert data["notes"] == ["torch sees 1 GPU(s), nvidia-smi 2 (CUDA_VISIBLE_DEVICES=0)"]
    assert data["problems"] == ["torch sees 1 of 2 GPUs: links not measured"] and data["exit_code"] == 2
    assert gates(data)["p2p_copy_gbps"]["result"] == "not measured" and probe.calls == []


def test_run_tool_reports_a_missing_command() -> None:
    result = gv.run_tool(("definitely-not-a-tool-xyz",))
    assert result.rc == 127 and result.error == "definitely-not-a-tool-xyz: command not found"
    result = gv.run_tool(("sh", "-c", "echo out; echo 'Failed to initialize NVML' >&2; exit 9"))
    assert (result.rc, result.out, result.error) == (9, ["out"], "out")


# --- the human table ------------------------------------------------------------------------------------
def test_table_for_two_gpus(capsys: pytest.CaptureFixture) -> None:
    load = FakeProbe(devices=2)
    links = _links(RTX_OUTPUTS)
    rc = gv.main(RIG, run=_runner(RTX_OUTPUTS), load_probe=lambda: load, which=lambda n: n, read_links=links)
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("GPU verdict: PASS (exit 0")
    assert "  NVLink GPU0: 2 link(s): 25.781 GB/s, 25.781 GB/s" in out
    assert "  GPU0-GPU1: topology NV2, driver P2P grant OK" in out
    assert "  P2P copy 1->0: 41.5 GB/s (256 MiB x 10)" in out
    assert "  all-reduce busbw plateau: 38.0 GB/s" in out and "NCCL transports: P2P/IPC" in out
    assert "gen3 x8/x16" in out and "250 W (100-320)" in out


def test_table_for_one_gpu(capsys: pytest.CaptureFixture) -> None:
    one = FakeProbe(1, "9.0")
    rc = gv.main(
        [], run=_runner(H200_OUTPUTS), load_probe=lambda: one, which=lambda n: n, read_links=_links(H200_OUTPUTS)
    )
    out = capsys.readouterr().out
    assert rc == 0 and "Links: not applicable (1 GPU)" in out and "Bandwidth: not applicable" in out
    assert "NVIDIA H100 80GB HBM3" in out and "131072 MiB" in out
