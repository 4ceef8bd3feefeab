"""Verify: the GPU/NVLink/P2P/NCCL verdict (vllm_rig/host/gpu_verdict.py) in the runtime venv, after a change.

It runs when the driver, the runtime or the thresholds changed (a stamp records what was verified),
with both GPUs free: a running service is stopped for the measurement and started again. The JSON
verdict stays on the host (/var/lib/vllm-rig/gpu-verdict.json). Exit 1 (a failed gate) stops the host
unless verify_gate is "warn"; exit 2 (could not run) always does.
"""

import hashlib
import shlex

from pyinfra.api import deploy

from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.core.stamp import stamped, with_key_of
from vllm_rig.paths import DRIVER_RECORD, GPU_VERDICT, GPU_VERDICT_PROVEN, SWITCHED_STAMP, Layout
from vllm_rig.settings import Settings


def verdict_command(s, layout: Layout) -> str:
    args = [
        f"--expect-gpus {s.gpu_count}",
        f"--driver-version {s.nvidia_driver_version}",
        f"--min-memory-mib {s.gpu_min_memory_mib}",
        f"--compute-cap {s.gpu_compute_capability}",
        f"--json-out {GPU_VERDICT}",
    ]
    if s.gpu_power_limit_w is not None:
        args.append(f"--power-limit-w {s.gpu_power_limit_w}")
    if s.verify_bandwidth:
        args += [f"--min-p2p-gbps {s.verify_min_p2p_gbps}", f"--min-allreduce-gbps {s.verify_min_allreduce_gbps}"]
    else:
        args.append("--skip-bandwidth")
    accept = "0|1" if s.verify_gate == "warn" else "0"
    unit = f"{s.service_name}.service"
    running = "active|activating|reloading"  # a server still loading holds GPU memory too
    return (
        f'was=$(systemctl is-active {unit}); case "$was" in {running}) systemctl stop {unit};; esac; '
        f"{shlex.join([layout.python, layout.host_package])} gpu_verdict {' '.join(args)}; rc=$?; "
        f'case "$was" in {running}) systemctl start {unit};; esac; '
        f'case $rc in {accept}) exit 0;; *) echo "gpu verdict: exit $rc"; exit 1;; esac'
    )


@deploy("Verify")
def verify_gpus(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    host_programs(layout.host_package)
    command = verdict_command(s, layout)
    stamped(
        name="GPU verdict: GPUs, NVLink, P2P, NCCL all-reduce",
        command=command,
        stamp=GPU_VERDICT_PROVEN,
        # The driver record too: a driver upgrade must be verified again even on the same runtime.
        key=with_key_of(
            hashlib.sha256(f"{command}|{DRIVER_RECORD}:{s.nvidia_driver_version}".encode()).hexdigest(),
            SWITCHED_STAMP,
        ),
        streamed=True,
    )
