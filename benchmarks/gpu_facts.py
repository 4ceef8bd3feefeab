"""What preflight's reads cost on a box: the batched host fact, the GPU facts, and each nvidia-smi call in them.

    python benchmarks/gpu_facts.py [--runs 10]         # on the GPU box itself (needs pyinfra importable)

Runs the exact commands the facts send (vllm_rig/stages/preflight/facts.py, gpu_facts.py) locally, --runs times each,
and prints the median and minimum in ms. Every deploy, no-op re-runs included, reads these once per host:
this says how much of a re-run is the driver answering rather than SSH or pyinfra.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm_rig.stages.preflight.facts import HostState  # noqa: E402
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus, reader_stdin  # noqa: E402

SMI_CALLS = {"nvidia-smi -q -x (the GPUs, BAR1 included)": "nvidia-smi -q -x"}


def time_command(command: str, runs: int, stdin: str = "") -> list[float]:
    """Wall ms of `sh -c command` per run (output discarded, exit code ignored: failures cost time too)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.DEVNULL
        subprocess.run(command, shell=True, input=stdin, text=True, stdout=out, stderr=out, check=False)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def gpus_seen() -> str:
    """Name, driver and persistence mode per GPU: nvidia-smi answers far slower with persistence off."""
    query = "nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader"
    run = subprocess.run(query, shell=True, capture_output=True, text=True, check=False)
    return "; ".join(line.strip() for line in run.stdout.splitlines()) or f"none ({run.stderr.strip() or 'no output'})"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    rows = {
        "fact HostState (one command)": HostState().command(path="/opt"),
        "fact NvidiaGpus (the reader on stdin: XML, NVML)": NvidiaGpus().command(),
        **SMI_CALLS,
        "sh -c true (the floor of one command)": "true",
    }
    print(f"Preflight's reads on this box, {args.runs} runs each; GPUs: {gpus_seen()}")
    print(f"  {'command':48} {'median ms':>10} {'min ms':>8}")
    for name, command in rows.items():
        samples = time_command(command, args.runs, "".join(reader_stdin().readlines()) if "NvidiaGpus" in name else "")
        print(f"  {name:48} {statistics.median(samples):10.1f} {min(samples):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
