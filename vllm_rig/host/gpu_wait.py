#!/usr/bin/env python3
"""Wait until every GPU the server will use is free: the vLLM unit's ExecStartPre (run as root, "+").

    python3 vllm-rig-host.pyz gpu_wait --devices 0,1 --max-used-mib 1024 --timeout 120 [--interval 2]

Free means no process on the card, compute or graphics, and memory.used at most --max-used-mib. Compute
processes come from `nvidia-smi --query-compute-apps` (bus id, memory); graphics ones (an Xorg or a desktop
shell: type G in plain nvidia-smi's process table; the query has no graphics twin) from that table, by the
GPU's nvidia-smi index. A leftover worker or a desktop session is the classic cause. A restart onto cards whose
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

from . import nvidia_smi

GPU_FIELDS = ("index", "pci.bus_id", "memory.used")


def _smi(*args: str) -> list[str]:
    run = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=False)
    if run.returncode != 0:
        raise RuntimeError(nvidia_smi.first_line((run.stdout + run.stderr).splitlines(), run.returncode))
    return run.stdout.splitlines()


def _named(pid: int, name: str, kind: str, used_mib: int | None) -> str:
    """'pid 1248 /usr/lib/xorg/Xorg (graphics, 28 MiB)': the name as nvidia-smi printed it."""
    return f"pid {pid} {name} ({kind}" + (f", {used_mib} MiB)" if used_mib is not None else ")")


def busy(devices: list[int] | None, max_used: int) -> list[str]:
    """What holds each chosen GPU, one phrase per card; [] when all are free."""
    query = nvidia_smi.parse_query_gpu(
        _smi(f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"), GPU_FIELDS
    )
    if query.problem:
        raise RuntimeError(query.problem)
    gpus = query.gpus
    apps = nvidia_smi.parse_compute_apps(
        _smi("--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits")
    )
    table = nvidia_smi.parse_process_table(_smi())
    chosen = [g for g in gpus if devices is None or g.index in devices]
    missing = sorted(set(devices or []) - {g.index for g in gpus})
    held = [f"GPU {i} is not there (nvidia-smi lists {len(gpus)})" for i in missing]
    for gpu in chosen:
        on_card = [a for a in apps if a.bus_id.lower() == (gpu.bus_id or "").lower()]
        names = [_named(a.pid, a.name, "compute", a.used_mib) for a in on_card]
        compute_pids = {a.pid for a in on_card}
        names += [
            _named(p.pid, p.name, "graphics", p.used_mib)
            for p in table
            if p.gpu == gpu.index and p.graphics and p.pid not in compute_pids
        ]
        if names:
            held.append(f"GPU {gpu.index} ({gpu.bus_id}) is held by {', '.join(names)}")
        elif (gpu.memory_used_mib or 0) > max_used:
            used = gpu.memory_used_mib
            held.append(f"GPU {gpu.index} ({gpu.bus_id}) has {used} MiB in use (at most {max_used} allowed)")
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
