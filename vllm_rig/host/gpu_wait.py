#!/usr/bin/env python3
"""Wait until every GPU the server will use is free: the vLLM unit's ExecStartPre (run as root, "+").

    python3 vllm-rig-host.pyz gpu_wait --devices 0,1 --max-used-mib 1024 --graphics-max-mib 64 --timeout 120 \
        [--interval 2]

Free means no compute process on the card, graphics processes holding at most --graphics-max-mib together, and
memory.used at most --max-used-mib. Every process comes from nvidia-smi's XML (gpu_facts.py), under its GPU with
its type: C compute, G graphics (an Xorg or a desktop shell), C+G both. A desktop on the box puts its display
server's graphics contexts on every card (Xorg and gnome-shell, 4-9 MiB each on a card without a monitor):
they are not compute and stay small, so up to --graphics-max-mib they are named and allowed (0: none); a
process that computes (C or C+G) always holds the card. A leftover worker is the classic cause. A restart onto
cards whose memory is still being released comes up with a smaller KV cache, silently; so the start waits.
After --timeout it fails with one line naming the card and what holds it; systemd's Restart= tries again later.
--devices are the indexes CUDA_VISIBLE_DEVICES names, read as nvidia-smi's (bus order). CUDA's own order is
fastest first; for two identical cards that is bus order too (belief, not checked on a real pair).
"all" for every GPU. Stdlib only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field

from . import gpu_facts


def _named(pid: int, name: str, kind: str, used_mib: int | None) -> str:
    """'pid 1248 /usr/lib/xorg/Xorg (graphics, 28 MiB)': the name as nvidia-smi printed it."""
    return f"pid {pid} {name} ({kind}" + (f", {used_mib} MiB)" if used_mib is not None else ")")


def _short(name: str) -> str:
    """'/usr/lib/xorg/Xorg' -> 'Xorg': the program, for the line that names an allowed desktop."""
    program = name.split(" ", 1)[0].rsplit("/", 1)[-1]
    return program or name


def _kind(kind: str) -> str:
    return "compute and graphics" if kind == "C+G" else "compute"


@dataclass(frozen=True)
class Survey:
    """What the wait saw: `held`, one phrase per card that is not free ([] when all are); `desktop`, one
    phrase per card whose only processes are a desktop's graphics within the allowance (named, allowed)."""

    held: list[str] = field(default_factory=list)
    desktop: list[str] = field(default_factory=list)


def survey(devices: list[int] | None, max_used: int, graphics_max: int = 0) -> Survey:
    """What holds each chosen GPU, and which desktops' graphics were allowed."""
    facts = gpu_facts.read()
    if facts.why_not:
        raise RuntimeError(facts.why_not)
    gpus = facts.gpus
    chosen = [g for g in gpus if devices is None or g.index in devices]
    missing = sorted(set(devices or []) - {g.index for g in gpus})
    seen = Survey([f"GPU {i} is not there (nvidia-smi lists {len(gpus)})" for i in missing])
    for gpu in chosen:
        card = f"GPU {gpu.index} ({gpu.bus_id})"
        compute = [_named(p.pid, p.name, _kind(p.kind), p.used_mib) for p in gpu.processes if not p.graphics_only]
        graphics = [p for p in gpu.processes if p.graphics_only]
        named = compute + [_named(p.pid, p.name, "graphics", p.used_mib) for p in graphics]
        graphics_mib = sum(p.used_mib or 0 for p in graphics)
        if compute:
            seen.held.append(f"{card} is held by {', '.join(named)}")
            continue
        if graphics and (not graphics_max or graphics_mib > graphics_max):
            allowance = (
                f"more than the {graphics_max} MiB a desktop's graphics may hold"
                if graphics_max
                else "no desktop's graphics allowed"
            )
            seen.held.append(
                f"{card} is held by {', '.join(named)}: graphics {graphics_mib} MiB, {allowance}"
                " (gpu_wait_graphics_max_mib)"
            )
            continue
        if (gpu.memory_used_mib or 0) > max_used:
            used = gpu.memory_used_mib
            seen.held.append(f"{card} has {used} MiB in use (at most {max_used} allowed)")
        if graphics:
            each = ", ".join(
                f"{_short(p.name)} {p.used_mib} MiB" if p.used_mib is not None else f"{_short(p.name)} (memory N/A)"
                for p in graphics
            )
            seen.desktop.append(f"GPU {gpu.index}: {each} (a desktop's graphics, allowed up to {graphics_max} MiB)")
    return seen


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="all")
    ap.add_argument("--max-used-mib", type=int, default=1024)
    ap.add_argument("--graphics-max-mib", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--interval", type=float, default=2)
    args = ap.parse_args(argv)
    devices = None if args.devices == "all" else [int(d) for d in args.devices.split(",") if d.strip()]

    def say(text: str) -> None:
        print(f"vllm-rig-gpu-wait: {text}", flush=True)

    start, last_note = time.monotonic(), 0.0
    while True:
        try:
            seen = survey(devices, args.max_used_mib, args.graphics_max_mib)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as err:
            seen = Survey([f"nvidia-smi failed: {err}"])
        held, desktop = seen.held, "".join(f"; {d}" for d in seen.desktop)
        waited = time.monotonic() - start
        if not held:
            if waited >= 1 or desktop:
                say(f"GPUs free after {waited:.0f}s{desktop}")
            return 0
        if waited >= args.timeout:
            say(f"not starting: {'; '.join(held)}{desktop} after waiting {waited:.0f}s; stop it or free the card")
            return 1
        if time.monotonic() - last_note >= 15 or not last_note:
            say(f"waiting for free GPUs: {'; '.join(held)}{desktop} ({waited:.0f}s of {args.timeout:.0f}s)")
            last_note = time.monotonic()
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
