#!/usr/bin/env python3
"""GPU, NVLink, P2P and NCCL verdict for a vllm-rig host: stdlib, plus torch from the venv, plus the host
package's GPU reader and rules (gpu_facts.py, gpu_rules.py: the ones preflight uses).

    python vllm-rig-host.pyz gpu_verdict [--json] [--expect-gpus N] [--driver-version V] [--min-memory-mib M]
                                         [--compute-cap 7.5] [--power-limit-w W] [--min-p2p-gbps X]
                                         [--min-allreduce-gbps Y] [--skip-bandwidth]

What it reads: nvidia-smi's XML (GPUs, driver, BAR1, PCIe, persistence, power limit), NVML (what the XML
lacks: topology, the driver's P2P grant, link states; nvml.py) and torch (CUDA devices, peer
access). What it measures, in spawned child processes that are killed at a timeout (a broken P2P path hangs
rather than fails): P2P copy bandwidth both ways between every pair of GPUs, and NCCL all-reduce bus
bandwidth over two ranks on GPUs 0 and 1.

Exit codes: 0 every gate passed; 1 a gate failed (GPU count, memory, compute capability, driver pin,
P2P copy, all-reduce); 2 no verdict could be reached (no nvidia-smi, NVML mismatch, no torch, CUDA
unusable, a measurement that could not run). A failed gate wins over "could not run": it is a verdict.
With one GPU, P2P, NVLink and all-reduce are "not applicable". --json prints one JSON object on stdout;
anything else (torch and NCCL warnings) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import gpu_facts, gpu_rules, nvml
from .nvidia_smi import first_line, parse_driver_module

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT = 0, 1, 2

MODULE_VERSION = ("cat", "/proc/driver/nvidia/version")  # read when NVML refuses: which module is loaded

P2P_MIB = 256  # copy size: large enough to sit on the bandwidth plateau
P2P_ITERS = 10
ALLREDUCE_SIZES = tuple(2**20 * 2**k for k in range(9))  # 1 MiB .. 256 MiB
ALLREDUCE_ITERS = 10
WARMUP_ITERS = 3
PLATEAU_POINTS = 3  # the plateau is the median bus bandwidth of the largest sizes
JOB_TIMEOUT_S = 60.0


# ---- running tools ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolResult:
    """One command's exit code, stdout lines and stderr lines."""

    rc: int
    out: list[str]
    err: list[str] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        """The tool's own error sentence when it failed (e.g. the NVML version mismatch), else None."""
        return None if self.rc == 0 else first_line([*self.out, *self.err], self.rc)


Runner = Callable[[tuple[str, ...]], ToolResult]


def run_tool(argv: tuple[str, ...], timeout: float = 30.0) -> ToolResult:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return ToolResult(127, [], [f"{argv[0]}: command not found"])
    except subprocess.TimeoutExpired:
        return ToolResult(124, [], [f"{' '.join(argv)} timed out after {timeout:.0f} s"])
    return ToolResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines())


# ---- what nvidia-smi says ----------------------------------------------------------------------------
def _gpu_dict(gpu: gpu_facts.Gpu) -> dict[str, Any]:
    """The report's JSON of one GPU: the reader's fields but its processes."""
    return {key: value for key, value in asdict(gpu).items() if key != "processes"}


@dataclass
class SmiView:
    """Everything read from nvidia-smi; error is set when nvidia-smi cannot be used at all."""

    error: str | None = None
    driver_version: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    links: nvml.Links = field(default_factory=nvml.Links)
    notes: list[str] = field(default_factory=list)


def collect_smi(
    run: Runner,
    which: Callable[[str], str | None] = shutil.which,
    read_links: Callable[[], nvml.Links] = nvml.read_links,
) -> SmiView:
    if which("nvidia-smi") is None:
        return SmiView(error="nvidia-smi not found: no NVIDIA driver installed, or not on PATH")
    result = run(gpu_facts.COMMAND)
    facts = gpu_facts.parse("\n".join(result.out if result.rc == 0 else [*result.out, *result.err]), result.rc)
    if facts.error:
        return SmiView(error=f"nvidia-smi failed: {_failure(run, facts.error)}")
    if facts.problem:
        return SmiView(error=facts.problem)
    view = SmiView(driver_version=facts.driver_version, gpus=[_gpu_dict(gpu) for gpu in facts.gpus])
    if len(view.gpus) > 1:
        view.links = read_links()
        if view.links.error:  # one line on why the links could not be read, not silence
            view.notes.append(view.links.error)
    return view


def _failure(run: Runner, error: gpu_facts.SmiError) -> str:
    """nvidia-smi's sentence; for the NVML mismatch with both sides of it: the library's version (newer
    drivers print it) and the loaded module's (/proc/driver/nvidia/version)."""
    if not error.mismatch:
        return error.message
    module = parse_driver_module(run(MODULE_VERSION).out)
    versions = [
        f"NVML library {error.library_version}" if error.library_version else "",
        f"loaded module {module.version} ({module.flavour})" if module.version else "",
    ]
    said = ", ".join(v for v in versions if v)
    return f"{error.message} ({said})" if said else error.message


# ---- torch: devices, peer access, and the measuring jobs --------------------------------------------
class TorchProbe:
    """The torch side. Tests replace it with a fake that has the same four methods."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def info(self) -> dict[str, Any]:
        """Versions and devices; "error" holds why CUDA is unusable."""
        torch = self.torch
        info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "error": None}
        try:
            torch.cuda.init()
            count = torch.cuda.device_count()
            info["devices"] = [_device(torch, i) for i in range(count)]
        except Exception as exc:  # torch raises RuntimeError/AssertionError/AcceleratorError here
            info["error"] = f"CUDA unusable: {type(exc).__name__}: {exc}"
            info["devices"] = []
        if not info["devices"] and not info["error"]:
            info["error"] = "CUDA unusable: torch sees no GPU"
        info["nccl"] = _nccl_version(torch)
        return info

    def peer_access(self, src: int, dst: int) -> bool:
        return bool(self.torch.cuda.can_device_access_peer(src, dst))

    def p2p_bandwidth(self, pairs: list[tuple[int, int]], mib: int, iters: int, timeout: float) -> dict[str, Any]:
        [result] = run_spawned(_p2p_worker, 1, (pairs, mib, iters), timeout)
        return result

    def allreduce(self, devices: list[int], sizes: tuple[int, ...], iters: int, timeout: float) -> dict[str, Any]:
        results = run_spawned(_allreduce_worker, len(devices), (devices, sizes, iters, free_port()), timeout)
        failed = [r for r in results if r.get("error")]
        return failed[0] if failed else results[0]


def _device(torch: Any, index: int) -> dict[str, str]:
    major, minor = torch.cuda.get_device_capability(index)
    return {"name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"}


def _nccl_version(torch: Any) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # no NCCL in this build
        return None
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def load_torch_probe() -> TorchProbe:
    import torch  # the runtime venv's torch; ImportError is reported as "could not run"

    return TorchProbe(torch)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_spawned(fn: Callable[..., None], nprocs: int, args: tuple, timeout: float) -> list[dict[str, Any]]:
    """Run fn(rank, out_dir, *args) in spawned processes; each writes out_dir/<rank>.json. A job still
    running at the timeout is killed and reported as an error (NCCL over a broken P2P path hangs)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gpu-verdict-") as out_dir:
        ctx = mp.start_processes(fn, args=(out_dir, *args), nprocs=nprocs, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):
                if time.monotonic() >= deadline:
                    hang = f"no answer after {timeout:.0f} s: a hang (ACS/IOMMU on the P2P path?)"
                    return [{"error": hang, "timed_out": True}] * nprocs
        except Exception as exc:  # a child died (signal, exit code) before writing its answer
            return [{"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"}] * nprocs
        finally:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.kill()
        return [_read_json(Path(out_dir, f"{rank}.json")) for rank in range(nprocs)]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"no result from the measuring process: {exc}"}


def _child_setup() -> None:
    """In a child: stdout to stderr, so --json keeps stdout to one JSON object."""
    os.dup2(2, 1)


def _p2p_worker(rank: int, out_dir: str, pairs: list[tuple[int, int]], mib: int, iters: int) -> None:
    _child_setup()
    result: dict[str, Any] = {}
    try:
        import torch

        for src, dst in pairs:
            result[f"{src}->{dst}"] = _copy_one_way(torch, src, dst, mib, iters)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    Path(out_dir, f"{rank}.json").write_text(json.dumps(result))


def _copy_one_way(torch: Any, src: int, dst: int, mib: int, iters: int) -> dict[str, Any]:
    """GB/s of `dst.copy_(src)` across devices, timed with CUDA events on the source device's stream
    (torch runs a cross-device copy there); the first copy is checked byte for byte by checksum."""
    try:
        size = mib * 2**20
        a = torch.randint(0, 256, (size,), dtype=torch.uint8, device=f"cuda:{src}")
        b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
        b.copy_(a)
        verified = _checksum(torch, a) == _checksum(torch, b)
        with torch.cuda.device(src):
            for _ in range(WARMUP_ITERS):
                b.copy_(a, non_blocking=True)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                b.copy_(a, non_blocking=True)
            end.record()
            end.synchronize()
        seconds = start.elapsed_time(end) / 1000.0
        del a, b
        torch.cuda.empty_cache()
        return {"gbps": round(size * iters / seconds / 1e9, 2), "bytes": size, "iters": iters, "verified": verified}
    except Exception as exc:  # OOM when something else holds the memory, a CUDA error on a bad path
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}


def _checksum(torch: Any, tensor: Any) -> int:
    return int(tensor.view(torch.int32).sum(dtype=torch.int64).item())


def _allreduce_worker(
    rank: int, out_dir: str, devices: list[int], sizes: tuple[int, ...], iters: int, port: int
) -> None:
    _child_setup()
    os.environ.setdefault("NCCL_DEBUG", "INFO")  # the transport lines ("via P2P/IPC") go to the file
    os.environ.setdefault("NCCL_DEBUG_FILE", str(Path(out_dir, "nccl.%p.log")))
    try:
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(devices[rank])
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(devices))
        try:
            result: dict[str, Any] = {"correct": _allreduce_correct(torch, dist, len(devices))}
            result["sizes"] = [_allreduce_one(torch, dist, size, iters, len(devices)) for size in sizes]
        finally:
            dist.destroy_process_group()
        result["transports"] = nccl_transports(Path(out_dir).glob("nccl.*.log"))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"}
    Path(out_dir, f"{rank}.json").write_text(json.dumps(result))


def _allreduce_correct(torch: Any, dist: Any, world: int) -> bool:
    """Each rank sends rank+1: the sum must arrive everywhere (a broken P2P path can corrupt it)."""
    tensor = torch.full((2**20,), float(dist.get_rank() + 1), device="cuda")
    dist.all_reduce(tensor)
    return bool((tensor == world * (world + 1) / 2).all().item())


def _allreduce_one(torch: Any, dist: Any, size: int, iters: int, world: int) -> dict[str, Any]:
    """nccl-tests' figures for one size: algbw = bytes / time, busbw = algbw * 2(n-1)/n."""
    tensor = torch.zeros(size // 4, dtype=torch.float32, device="cuda")
    for _ in range(WARMUP_ITERS):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dist.all_reduce(tensor)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000.0 / iters
    algbw = size / seconds / 1e9
    return {
        "bytes": size,
        "time_us": round(seconds * 1e6, 1),
        "algbw_gbps": round(algbw, 2),
        "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2),
    }


def nccl_transports(logs: Any) -> list[str]:
    """Transports NCCL chose between ranks, from its INFO lines: "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    and the shared-memory ones without the "/N" ("Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", what a
    2080 Ti pair without NVLink gets; older NCCL names the ranks by bus id, "1[c3000] -> 0[3000]")."""
    found: set[str] = set()
    for path in logs:
        for line in Path(path).read_text(errors="replace").splitlines():
            if match := re.search(r"Channel \d+(?:/\d+)? : .* via (\S+)", line):
                found.add(match.group(1))
    return sorted(found)


def plateau(sizes: list[dict[str, Any]]) -> float | None:
    """The bus bandwidth the curve flattens at: the median of the largest sizes' figures."""
    tops = [s["busbw_gbps"] for s in sorted(sizes, key=lambda s: s["bytes"])[-PLATEAU_POINTS:]]
    return round(statistics.median(tops), 2) if tops else None


# ---- the report ---------------------------------------------------------------------------------------
@dataclass
class Report:
    options: argparse.Namespace
    problems: list[str] = field(default_factory=list)  # why no full verdict could be reached
    smi: SmiView = field(default_factory=SmiView)
    torch: dict[str, Any] | None = None
    peer_access: dict[str, bool] | str = "not applicable"
    p2p_bandwidth: dict[str, Any] | str = "not applicable"
    allreduce: dict[str, Any] | str = "not applicable"
    gates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def gpu_count(self) -> int:
        if self.smi.gpus:
            return len(self.smi.gpus)
        return len(self.torch["devices"]) if self.torch else 0

    @property
    def torch_devices(self) -> int:
        return len(self.torch["devices"]) if self.torch and not self.torch.get("error") else 0


def collect(
    options: argparse.Namespace,
    run: Runner,
    load_probe: Callable[[], Any],
    which: Callable,
    read_links: Callable[[], nvml.Links] = nvml.read_links,
) -> Report:
    report = Report(options)
    report.smi = collect_smi(run, which, read_links)
    if report.smi.error:
        report.problems.append(report.smi.error)
    probe = _probe(report, load_probe)
    if probe is not None and report.torch_devices > 1:
        measure_links(report, probe)
    elif report.gpu_count > 1:  # several GPUs, but torch cannot reach two of them
        report.peer_access = report.p2p_bandwidth = report.allreduce = NOT_MEASURED
        if probe is not None:
            report.problems.append(f"torch sees {report.torch_devices} of {report.gpu_count} GPUs: links not measured")
    report.gates = evaluate(report)
    return report


def _probe(report: Report, load_probe: Callable[[], Any]) -> Any:
    try:
        probe = load_probe()
    except ImportError as exc:
        report.problems.append(f"torch not importable ({exc}): run this with the runtime venv's python")
        return None
    report.torch = probe.info()
    if report.torch.get("error"):
        report.problems.append(report.torch["error"])
        return None
    if report.smi.gpus and len(report.torch["devices"]) != len(report.smi.gpus):
        report.smi.notes.append(
            f"torch sees {len(report.torch['devices'])} GPU(s), nvidia-smi {len(report.smi.gpus)} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    return probe


def measure_links(report: Report, probe: Any) -> None:
    count = report.torch_devices
    pairs = [(a, b) for a in range(count) for b in range(count) if a != b]
    report.peer_access = {f"{a}->{b}": probe.peer_access(a, b) for a, b in pairs}
    if report.options.skip_bandwidth:
        report.p2p_bandwidth = report.allreduce = "skipped"
        return
    opts = report.options
    report.p2p_bandwidth = probe.p2p_bandwidth(pairs, opts.p2p_mib, P2P_ITERS, opts.timeout)
    sizes = tuple(s for s in ALLREDUCE_SIZES if s <= opts.allreduce_max_mib * 2**20)
    report.allreduce = probe.allreduce([0, 1], sizes, ALLREDUCE_ITERS, opts.timeout)
    if isinstance(report.allreduce, dict) and report.allreduce.get("sizes"):
        report.allreduce["plateau_busbw_gbps"] = plateau(report.allreduce["sizes"])
    for what, result in (("P2P copy", report.p2p_bandwidth), ("all-reduce", report.allreduce)):
        if oom := next((e for e in job_errors(result) if out_of_memory(e)), None):
            used = ", ".join(f"GPU{g['index']} {g['memory_used_mib']} MiB" for g in report.smi.gpus)
            report.problems.append(f"{what} could not run: {oom} (memory in use: {used}; stop the vLLM service)")


def job_errors(result: Any) -> list[str]:
    """The errors of a measuring job: its own, or (P2P copies) those of single pairs."""
    if not isinstance(result, dict):
        return []
    if result.get("error"):
        return [result["error"]]
    return [v["error"] for v in result.values() if isinstance(v, dict) and v.get("error")]


def out_of_memory(error: str) -> bool:
    """Something else holds the GPU memory: the check could not run, which says nothing of the links."""
    return "out of memory" in error.lower()


# ---- gates ----------------------------------------------------------------------------------------------
PASS, FAIL, WARN = "pass", "fail", "warn"
NOT_APPLICABLE, NOT_CHECKED, SKIPPED, NOT_MEASURED = "not applicable", "not checked", "skipped", "not measured"


def gate(name: str, measured: Any, threshold: Any, result: str, fatal: bool, detail: str = "") -> dict[str, Any]:
    keys = ("name", "measured", "threshold", "result", "fatal", "detail")
    return dict(zip(keys, (name, measured, threshold, result, fatal, detail), strict=True))


def evaluate(report: Report) -> list[dict[str, Any]]:
    """Fatal gates decide the exit code; the others warn (they explain a slow or odd box)."""
    return [
        gate_count(report),
        gate_memory(report),
        gate_compute_cap(report),
        gate_driver(report),
        gate_p2p_bandwidth(report),
        gate_allreduce(report),
        check_nvlink(report),
        check_p2p_grant(report),
        check_peer_access(report),
        check_persistence(report),
        check_power_limit(report),
    ]


def gate_count(report: Report) -> dict[str, Any]:
    expected = report.options.expect_gpus
    count = report.gpu_count
    if not report.smi.gpus and not report.torch_devices:
        return gate("gpu_count", None, expected, NOT_MEASURED, True, "no GPU list (see problems)")
    ok = count == expected if expected is not None else count >= 1
    return gate("gpu_count", count, expected if expected is not None else ">= 1", PASS if ok else FAIL, True)


def _per_gpu(report: Report, key: str) -> list[Any]:
    return [gpu[key] for gpu in report.smi.gpus]


def gate_memory(report: Report) -> dict[str, Any]:
    least, values = report.options.min_memory_mib, _per_gpu(report, "memory_mib")
    if not values:
        return gate("gpu_memory_mib", None, least, NOT_MEASURED, True)
    if least is None:
        return gate("gpu_memory_mib", values, None, NOT_CHECKED, True)
    small = [f"GPU{g['index']}: {p}" for g in report.smi.gpus if (p := gpu_rules.memory_problem(g, least))]
    return gate("gpu_memory_mib", values, least, FAIL if small else PASS, True, ", ".join(small))


def gate_compute_cap(report: Report) -> dict[str, Any]:
    """By preflight's rule; torch's capability fills in where the XML's architecture does not fix it (Ampere)."""
    wanted, gpus = report.options.compute_cap, [dict(g) for g in report.smi.gpus]
    devices = report.torch["devices"] if report.torch and report.torch_devices == len(gpus) else []
    for gpu, device in zip(gpus, devices, strict=False):
        gpu["compute_cap"] = gpu.get("compute_cap") or device["capability"]
    if not gpus and devices:
        gpus = [{"index": i, "compute_cap": d["capability"]} for i, d in enumerate(devices)]
    values = [g.get("compute_cap") or g.get("architecture") for g in gpus]
    if not gpus:
        return gate("compute_capability", None, wanted, NOT_MEASURED, True)
    if wanted is None:
        return gate("compute_capability", values, None, NOT_CHECKED, True)
    odd = [f"GPU{g['index']}: {p}" for g in gpus if (p := gpu_rules.capability_problem(g, wanted))]
    return gate("compute_capability", values, wanted, FAIL if odd else PASS, True, ", ".join(odd))


def gate_driver(report: Report) -> dict[str, Any]:
    pin, version = report.options.driver_version, report.smi.driver_version
    if version is None:
        return gate("driver_version", None, pin, NOT_MEASURED, True)
    if pin is None:
        return gate("driver_version", version, None, NOT_CHECKED, True)
    return gate("driver_version", version, pin, PASS if version == pin else FAIL, True)


def _early_result(name: str, value: Any, threshold: Any) -> dict[str, Any] | None:
    """The gate for a measurement without figures: a word ("not applicable", "skipped"), a job that could
    not run (out of memory), or one that failed: it hung (NCCL and P2P copies hang on a broken path) or a
    CUDA/NCCL error stopped it. None: there are figures to judge."""
    if isinstance(value, str):
        return gate(name, None, threshold, value, True)
    if value is None:
        return gate(name, None, threshold, NOT_MEASURED, True)
    errors = job_errors(value)
    if any(out_of_memory(e) for e in errors):
        return gate(name, None, threshold, NOT_MEASURED, True, errors[0])
    if value.get("error"):
        return gate(name, None, threshold, FAIL, True, value["error"])
    return None


def gate_p2p_bandwidth(report: Report) -> dict[str, Any]:
    least, value = report.options.min_p2p_gbps, report.p2p_bandwidth
    if (early := _early_result("p2p_copy_gbps", value, least)) is not None:
        return early
    assert isinstance(value, dict)  # _early_result answered a word and None
    broken = [k for k, v in value.items() if v.get("error") or not v.get("verified")]
    figures = {k: v.get("gbps") for k, v in value.items()}
    if broken:
        detail = "; ".join(f"{k}: {value[k].get('error') or 'copied data differ'}" for k in broken)
        return gate("p2p_copy_gbps", figures, least, FAIL, True, detail)
    slowest = min(figures.values())
    if least is None:
        return gate("p2p_copy_gbps", figures, None, NOT_CHECKED, True, f"slowest {slowest} GB/s")
    return gate("p2p_copy_gbps", figures, least, PASS if slowest >= least else FAIL, True, f"slowest {slowest} GB/s")


def gate_allreduce(report: Report) -> dict[str, Any]:
    least, value = report.options.min_allreduce_gbps, report.allreduce
    if (early := _early_result("allreduce_busbw_gbps", value, least)) is not None:
        return early
    assert isinstance(value, dict)  # _early_result answered a word and None
    busbw = value.get("plateau_busbw_gbps")
    if not value.get("correct", True):
        return gate("allreduce_busbw_gbps", busbw, least, FAIL, True, "all-reduce returned a wrong sum")
    if least is None:
        return gate("allreduce_busbw_gbps", busbw, None, NOT_CHECKED, True)
    ok = busbw is not None and busbw >= least
    return gate("allreduce_busbw_gbps", busbw, least, PASS if ok else FAIL, True)


def _links(report: Report) -> gpu_rules.Links:
    indexes = [g["index"] for g in report.smi.gpus]
    return gpu_rules.links(report.smi.links.topo, report.smi.links.p2p, report.smi.links.nvlink_down, indexes)


def check_nvlink(report: Report) -> dict[str, Any]:
    """NV# between every pair (NVML's links), and every link of every GPU up: preflight's rule (gpu_rules)."""
    if len(report.smi.gpus) < 2:
        return gate("nvlink", None, "NV# between GPUs", NOT_APPLICABLE, False)
    links = _links(report)
    problem = links.nvlink_problem()
    return gate("nvlink", links.kinds, "NV# between GPUs", WARN if problem else PASS, False, problem or "")


def check_p2p_grant(report: Report) -> dict[str, Any]:
    if len(report.smi.gpus) < 2:
        return gate("p2p_grant", None, "OK", NOT_APPLICABLE, False)
    links = _links(report)
    refused = links.refused()
    detail = "CNS/GNS/TNS/NS = refused" if refused else ""
    return gate("p2p_grant", links.grants, "OK", WARN if refused else PASS, False, detail)


def check_peer_access(report: Report) -> dict[str, Any]:
    if not isinstance(report.peer_access, dict):
        return gate("peer_access", None, True, report.peer_access, False)
    ok = all(report.peer_access.values())
    return gate("peer_access", report.peer_access, True, PASS if ok else WARN, False)


def check_persistence(report: Report) -> dict[str, Any]:
    values = _per_gpu(report, "persistence")
    if not values:
        return gate("persistence_mode", None, True, NOT_MEASURED, False)
    return gate("persistence_mode", values, True, PASS if all(values) else WARN, False)


def check_power_limit(report: Report) -> dict[str, Any]:
    wanted, values = report.options.power_limit_w, _per_gpu(report, "power_limit_w")
    if not values:
        return gate("power_limit_w", None, wanted, NOT_MEASURED, False)
    if wanted is None:
        return gate("power_limit_w", values, None, NOT_CHECKED, False)
    ok = all(v is not None and abs(v - wanted) < 1.0 for v in values)
    return gate("power_limit_w", values, wanted, PASS if ok else WARN, False)


def exit_code(report: Report) -> int:
    if any(g["fatal"] and g["result"] == FAIL for g in report.gates):
        return EXIT_FAIL
    return EXIT_CANNOT if report.problems else EXIT_PASS


VERDICT = {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_CANNOT: "could not run"}


# ---- output ---------------------------------------------------------------------------------------------
def as_json(report: Report, elapsed: float) -> dict[str, Any]:
    code = exit_code(report)
    return {
        "verdict": VERDICT[code],
        "exit_code": code,
        "problems": report.problems,
        "notes": report.smi.notes,
        "gpu_count": report.gpu_count,
        "driver_version": report.smi.driver_version,
        "gpus": report.smi.gpus,
        "torch": report.torch,
        "nvlink": {str(k): v for k, v in report.smi.links.nvlink.items()},
        "nvlink_down": report.smi.links.nvlink_down,
        "topology": report.smi.links.topo,
        "p2p_grant": report.smi.links.p2p,
        "peer_access": report.peer_access,
        "p2p_bandwidth": report.p2p_bandwidth,
        "allreduce": report.allreduce,
        "gates": report.gates,
        "elapsed_s": round(elapsed, 1),
    }


def render_table(data: dict[str, Any]) -> str:
    lines = [f"GPU verdict: {data['verdict'].upper()} (exit {data['exit_code']}, {data['elapsed_s']} s)", ""]
    lines += _gpu_lines(data)
    lines += _link_lines(data)
    lines += _bandwidth_lines(data)
    lines += _gate_lines(data["gates"])
    for title, items in (("Problems", data["problems"]), ("Notes", data["notes"])):
        if items:
            lines += ["", f"{title}:", *(f"  - {item}" for item in items)]
    return "\n".join(lines)


def _gpu_lines(data: dict[str, Any]) -> list[str]:
    torch = data["torch"] or {}
    head = f"GPUs: {data['gpu_count']}, driver {data['driver_version'] or '?'}"
    head += f", torch {torch.get('version', 'absent')} (CUDA {torch.get('cuda')}, NCCL {torch.get('nccl')})"
    rows = [("GPU", "name", "memory", "used", "cc", "PCIe", "persist", "power (min-max)", "BAR1")]
    for g in data["gpus"]:
        power = f"{_num(g['power_limit_w'])} W ({_num(g['power_min_w'])}-{_num(g['power_max_w'])})"
        rows.append(
            (
                str(g["index"]),
                g["name"],
                f"{g['memory_mib']} MiB",
                f"{g['memory_used_mib']} MiB",
                g["compute_cap"],
                f"gen{g['pcie_gen']} x{g['pcie_width']}/x{g['pcie_width_max']}",
                "on" if g["persistence"] else "off",
                power,
                f"{g.get('bar1_mib')} MiB",
            )
        )
    return [head, *(_columns(rows) if data["gpus"] else ["  (nvidia-smi lists none)"]), ""]


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _link_lines(data: dict[str, Any]) -> list[str]:
    if data["gpu_count"] < 2:
        return [f"Links: not applicable ({data['gpu_count']} GPU)", ""]
    lines = ["Links:"]
    for gpu, links in data["nvlink"].items():
        if f"GPU{gpu} all links" in data["nvlink_down"]:
            lines.append(f"  NVLink GPU{gpu}: all links inactive (NVML: the bridge is down or missing)")
        else:
            lines.append(f"  NVLink GPU{gpu}: {len(links)} link(s): {_speeds(links)}")
    if not data["nvlink"]:
        lines.append("  NVLink: no links reported")
    for a, row in data["topology"].items():
        for b, kind in row.items():
            if a < b:
                grant = data["p2p_grant"].get(a, {}).get(b, "?")
                lines.append(f"  {a}-{b}: topology {kind}, driver P2P grant {grant}")
    if isinstance(data["peer_access"], dict):
        lines.append("  torch peer access: " + ", ".join(f"{k} {v}" for k, v in data["peer_access"].items()))
    return [*lines, ""]


def _speeds(links: list[float | None]) -> str:
    words = ["inactive" if s is None else f"{s:g} GB/s" for s in links]
    if len(words) > 2 and len(set(words)) == 1:
        return f"all {words[0]}"
    return ", ".join(words) or "none"


def _bandwidth_lines(data: dict[str, Any]) -> list[str]:
    p2p, allreduce = data["p2p_bandwidth"], data["allreduce"]
    if isinstance(p2p, str) and isinstance(allreduce, str):
        return [f"Bandwidth: {p2p}", ""]
    lines = ["Bandwidth:"]
    if isinstance(p2p, dict) and not p2p.get("error"):
        for pair, v in p2p.items():
            figure = v.get("error") or f"{v['gbps']} GB/s ({v['bytes'] // 2**20} MiB x {v['iters']})"
            lines.append(f"  P2P copy {pair}: {figure}" + ("" if v.get("verified", True) else " DATA DIFFER"))
    if isinstance(allreduce, dict) and allreduce.get("sizes"):
        curve = ", ".join(f"{s['bytes'] // 2**20}M {s['busbw_gbps']}" for s in allreduce["sizes"])
        lines.append(f"  all-reduce busbw plateau: {allreduce['plateau_busbw_gbps']} GB/s (2 ranks, GB/s: {curve})")
        lines.append(f"  NCCL transports: {', '.join(allreduce.get('transports') or ['unknown'])}")
    return [*lines, ""]


def _gate_lines(gates: list[dict[str, Any]]) -> list[str]:
    rows = [("gate", "measured", "threshold", "result")]
    for g in gates:
        result = g["result"] + ("" if g["fatal"] or g["result"] != WARN else " (not fatal)")
        rows.append((g["name"], _short(g["measured"]), _short(g["threshold"]), result + _detail(g)))
    return ["Gates:", *_columns(rows)]


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _detail(g: dict[str, Any]) -> str:
    return f": {g['detail']}" if g["detail"] and g["result"] in (FAIL, WARN, NOT_MEASURED) else ""


# ---- command line ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GPU/NVLink/P2P/NCCL verdict for this host.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--json-out", help="also write the JSON object to this file (the table still prints)")
    parser.add_argument("--expect-gpus", type=int, help="exact GPU count required (default: at least 1)")
    parser.add_argument("--driver-version", help="the pinned driver version, e.g. 580.159.03")
    parser.add_argument("--min-memory-mib", type=int, help="least memory per GPU in MiB")
    parser.add_argument("--compute-cap", help="compute capability every GPU must report, e.g. 7.5")
    parser.add_argument("--power-limit-w", type=float, help="expected power limit in W (a warning if off)")
    parser.add_argument("--min-p2p-gbps", type=float, help="least P2P copy GB/s, each direction")
    parser.add_argument("--min-allreduce-gbps", type=float, help="least NCCL all-reduce bus bandwidth, GB/s")
    parser.add_argument("--skip-bandwidth", action="store_true", help="no copy or all-reduce measurement")
    parser.add_argument("--p2p-mib", type=int, default=P2P_MIB, help="P2P copy size in MiB (default 256)")
    parser.add_argument("--allreduce-max-mib", type=int, default=256, help="largest all-reduce size, MiB")
    parser.add_argument("--timeout", type=float, default=JOB_TIMEOUT_S, help="seconds per measuring job")
    return parser.parse_args(argv)


def main(
    argv: list[str] | None = None,
    run: Runner = run_tool,
    load_probe: Callable[[], Any] = load_torch_probe,
    which: Callable[[str], str | None] = shutil.which,
    read_links: Callable[[], nvml.Links] = nvml.read_links,
) -> int:
    started = time.monotonic()
    options = parse_args(argv)
    report = collect(options, run, load_probe, which, read_links)
    data = as_json(report, time.monotonic() - started)
    print(json.dumps(data) if options.json else render_table(data))
    if options.json_out:
        with open(options.json_out, "w") as out:
            json.dump(data, out, indent=2)
    return data["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
