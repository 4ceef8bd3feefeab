"""nvidia-smi parsers against real outputs (H200 box, tests/unit/fixtures/tool_outputs/h200/) and against
the two-GPU, NVLink shapes the 2080 Ti rigs print (laid out as in public reports of the real tool)."""

from __future__ import annotations

from pathlib import Path

from vllm_rig.stages.preflight.gpu_facts import GPU_FIELDS as NvidiaGpus_FIELDS
from vllm_rig.stages.preflight.gpu_facts import (
    NvidiaGpus,
    NvidiaTopology,
    parse_bar1,
    parse_matrix,
    parse_nvlink_status,
    parse_query_gpu,
    split_rc,
)

H200 = Path(__file__).parent / "fixtures" / "tool_outputs" / "h200"


def _lines(name: str) -> list[str]:
    return (H200 / f"{name}.out").read_text().splitlines()


def test_query_gpu_real_h200() -> None:
    [gpu] = parse_query_gpu(_lines("nvidia-smi_query_noheader_nounits"), fields=QUERY_FIELDS_CAPTURED)
    assert gpu["name"] == "NVIDIA H200" and gpu["memory_mib"] == 143771 and gpu["compute_cap"] == "9.0"
    assert gpu["driver_version"] == "580.159.04" and gpu["persistence"] is True
    assert (gpu["power_limit_w"], gpu["power_min_w"], gpu["power_max_w"]) == (700.0, 200.0, 700.0)
    assert gpu["pcie_width"] == 16 and gpu["bus_id"] == "00000000:00:06.0"


# capture.sh asked for these, in this order (one more field than the fact: pcie.link.gen.current).
QUERY_FIELDS_CAPTURED = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "memory.used",
    "compute_cap",
    "driver_version",
    "persistence_mode",
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "pcie.link.gen.current",
    "pci.bus_id",
)


def test_single_gpu_topology_real_h200() -> None:
    assert parse_matrix(_lines("nvidia-smi_topo_m")) == {"GPU0": {"GPU0": "X"}}
    assert parse_matrix(_lines("nvidia-smi_topo_p2p_rw")) == {"GPU0": {"GPU0": "X"}}
    assert parse_nvlink_status(_lines("nvidia-smi_nvlink_s")) == {}


def test_bar1_real_h200() -> None:
    assert parse_bar1(_lines("nvidia-smi_q_memory")) == [{"fb_total_mib": 143771, "bar1_total_mib": 262144}]


def test_bad_field_is_an_error_not_a_gpu() -> None:
    out = (H200 / "nvidia-smi_query_badfield.out").read_text().splitlines()
    result = split_rc([*out, "rc=2"])
    assert result.rc == 2 and result.error == 'Field "bogus.field" is not a valid field to query.'


TWO_GPU_TOPO = [
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
    "GPU0\t X \tNV2\t0-15\t0\t\tN/A",
    "GPU1\tNV2\t X \t0-15\t0\t\tN/A",
    "",
    "Legend:",
    "",
    "  X    = Self",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
]
TWO_GPU_P2P = [" \t\x1b[4mGPU0\tGPU1\t\x1b[0m", " GPU0\tX\tOK\t", " GPU1\tOK\tX\t", "", "Legend:", "  OK   = Status Ok"]
TWO_GPU_NVLINK = [
    "GPU 0: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-a4211eb1-75b7-df20-7a29-4bd4fd504774)",
    "\t Link 0: 25.781 GB/s",
    "\t Link 1: 25.781 GB/s",
    "GPU 1: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5)",
    "\t Link 0: 25.781 GB/s",
    "\t Link 1: <inactive>",
]


def test_two_gpu_nvlink_shapes() -> None:
    assert parse_matrix(TWO_GPU_TOPO) == {"GPU0": {"GPU0": "X", "GPU1": "NV2"}, "GPU1": {"GPU0": "NV2", "GPU1": "X"}}
    assert parse_matrix(TWO_GPU_P2P)["GPU0"]["GPU1"] == "OK"
    assert parse_nvlink_status(TWO_GPU_NVLINK) == {0: [25.781, 25.781], 1: [25.781, None]}


def test_gpus_fact_adds_bar1_from_the_memory_report() -> None:
    query = (H200 / "nvidia-smi_query_noheader_nounits.out").read_text().splitlines()
    # The fact asks for fewer fields than capture.sh did: keep the ones it asks for, in its order.
    row = dict(zip(QUERY_FIELDS_CAPTURED, [c.strip() for c in query[0].split(",")], strict=True))
    line = ", ".join(row[f] for f in NvidiaGpus_FIELDS)
    out = ["@@query", line, "rc=0", "@@memory", *_lines("nvidia-smi_q_memory")]
    [gpu] = NvidiaGpus().process(out)["gpus"]
    assert gpu["bar1_mib"] == 262144 and gpu["memory_mib"] == 143771


def test_version_mismatch_becomes_data() -> None:
    fact = NvidiaGpus()
    out = [
        "@@query",
        "Failed to initialize NVML: Driver/library version mismatch",
        "NVML library version: 580.159",
        "rc=18",
        "@@memory",
        "Failed to initialize NVML: Driver/library version mismatch",
    ]
    assert fact.process(out) == {
        "rc": 18,
        "error": "Failed to initialize NVML: Driver/library version mismatch",
        "gpus": [],
    }


def test_topology_fact_reads_three_commands_in_one() -> None:
    fact = NvidiaTopology()
    assert fact.command().count("nvidia-smi") == 3
    out = ["@@-m", *TWO_GPU_TOPO, "rc=0", "@@rw", *TWO_GPU_P2P, "rc=0", "@@-s", *TWO_GPU_NVLINK, "rc=0"]
    result = fact.process(out)
    assert result["rc"] == 0 and result["topo"]["GPU1"]["GPU0"] == "NV2"
    assert result["p2p"]["GPU1"]["GPU0"] == "OK" and result["nvlink"][0] == [25.781, 25.781]
