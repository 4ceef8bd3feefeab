#!/usr/bin/env python3
"""Wait until every GPU the server will use is free: the vLLM unit's ExecStartPre (run as root, "+").

    gpu_wait.py --devices 0,1 --max-used-mib 1024 --timeout 120 [--interval 2]

Free means no compute process on the card (`nvidia-smi --query-compute-apps`: a desktop session or a
leftover worker is the classic cause) and memory.used at most --max-used-mib. A restart onto cards whose
memory is still being released comes up with a smaller KV cache, silently; so the start waits. After
--timeout it fails with one line naming the card and what holds it; systemd's Restart= tries again later.
--devices are the indexes CUDA_VISIBLE_DEVICES names, read as nvidia-smi's (bus order). CUDA's own order is
fastest first; for two identical cards that is bus order too (belief, not checked on a real pair).
"all" for every GPU. Stdlib only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    index: int
    bus_id: str
    used_mib: int


@dataclass(frozen=True)
class App:
    bus_id: str
    pid: int
    name: str
    used_mib: int | None


def _smi(*args: str) -> list[str]:
    run = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=False)
    if run.returncode != 0:
        raise RuntimeError(
            (run.stdout + run.stderr).strip().splitlines()[0]
            if (run.stdout + run.stderr).strip()
            else f"nvidia-smi exited {run.returncode}"
        )
    return [line for line in run.stdout.splitlines() if line.strip()]


def _mib(value: str) -> int | None:
    value = value.strip().removesuffix("MiB").strip()
    return int(value) if value.isdigit() else None  # "[N/A]" on some cards and drivers


def parse_gpus(lines: list[str]) -> list[Gpu]:
    """`--query-gpu=index,pci.bus_id,memory.used --format=csv,noheader,nounits` rows."""
    gpus = []
    for line in lines:
        index, bus, used = (cell.strip() for cell in line.split(",")[:3])
        gpus.append(Gpu(int(index), bus, _mib(used) or 0))
    return gpus


def parse_apps(lines: list[str]) -> list[App]:
    """`--query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader,nounits` rows;
    a process name may itself hold commas, so the first two cells and the last one are split off."""
    apps = []
    for line in lines:
        bus, pid, rest = (cell.strip() for cell in line.split(",", 2))
        name, _, used = rest.rpartition(",")
        apps.append(App(bus, int(pid), name.strip() or rest, _mib(used)))
    return apps


def busy(devices: list[int] | None, max_used: int) -> list[str]:
    """What holds each chosen GPU, one phrase per card; [] when all are free."""
    gpus = parse_gpus(_smi("--query-gpu=index,pci.bus_id,memory.used", "--format=csv,noheader,nounits"))
    apps = parse_apps(
        _smi("--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits")
    )
    chosen = [g for g in gpus if devices is None or g.index in devices]
    missing = sorted(set(devices or []) - {g.index for g in gpus})
    held = [f"GPU {i} is not there (nvidia-smi lists {len(gpus)})" for i in missing]
    for gpu in chosen:
        on_card = [a for a in apps if a.bus_id.lower() == gpu.bus_id.lower()]
        if on_card:
            names = ", ".join(
                f"pid {a.pid} {a.name}" + (f" ({a.used_mib} MiB)" if a.used_mib is not None else "") for a in on_card
            )
            held.append(f"GPU {gpu.index} ({gpu.bus_id}) is held by {names}")
        elif gpu.used_mib > max_used:
            held.append(f"GPU {gpu.index} ({gpu.bus_id}) has {gpu.used_mib} MiB in use (at most {max_used} allowed)")
    return held


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="all")
    ap.add_argument("--max-used-mib", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--interval", type=float, default=2)
    args = ap.parse_args(argv)
    devices = None if args.devices == "all" else [int(d) for d in args.devices.split(",") if d.strip()]

    def say(text: str) -> None:
        print(f"vllm-rig-gpu-wait: {text}", flush=True)

    start, last_note, held = time.monotonic(), 0.0, []
    while True:
        try:
            held = busy(devices, args.max_used_mib)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as err:
            held = [f"nvidia-smi failed: {err}"]
        waited = time.monotonic() - start
        if not held:
            if waited >= 1:
                say(f"GPUs free after {waited:.0f}s")
            return 0
        if waited >= args.timeout:
            say(f"not starting: {'; '.join(held)} after waiting {waited:.0f}s; stop it or free the card")
            return 1
        if time.monotonic() - last_note >= 15 or not last_note:
            say(f"waiting for free GPUs: {'; '.join(held)} ({waited:.0f}s of {args.timeout:.0f}s)")
            last_note = time.monotonic()
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
