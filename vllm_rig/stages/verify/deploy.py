"""Verify: the GPU/NVLink/P2P/NCCL verdict (vllm_rig/host/gpu_verdict.py) in the runtime venv, after a change.

It runs when the driver, the runtime or the thresholds changed (a stamp records what was verified),
with both GPUs free: a running service is stopped for the measurement and started again, with the unit this
run installs only (start_again): a unit that changes is started by the service stage, once. The JSON
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
from vllm_rig.stages.service.unit import render_unit, server_gone_command


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


def start_again(unit: str, unit_path: str, unit_text: str, when_it_fails: str) -> str:
    """The shell that starts the service again after the verdict, only where it would start with the unit this
    run installs: the file on the box is the one the service stage renders. Where the unit changes (a switch of
    runtime kind changes the server's flags: the upstream kind's --reasoning-config, which the fork refuses with
    exit 2), a start now would run the new runtime with the old flags; it stays stopped and the service stage
    starts it once, with its new unit. A start that fails says why (`when_it_fails`)."""
    sha = hashlib.sha256(unit_text.encode()).hexdigest()
    return (
        f'if [ "$(sha256sum < {unit_path} 2>/dev/null)" = "{sha}  -" ]; then '
        f"systemctl start {unit} || {when_it_fails}; "
        f'else echo "{unit} left stopped: its unit changes in this run, the service stage starts it with the new one"; '
        "fi"
    )


def verdict_run(s: Settings, layout: Layout) -> str:
    """verdict_command, but the service is started again only with the unit this run leaves on the box."""
    unit = f"{s.service_name}.service"
    again = start_again(unit, layout.unit_path, render_unit(s, layout), server_gone_command(s, layout))
    command = verdict_command(s, layout)
    old = f"systemctl start {unit};;"
    assert command.count(old) == 1
    return command.replace(old, f"{again};;")


@deploy("Verify")
def verify_gpus(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    host_programs(layout.host_package)
    command = verdict_command(s, layout)  # the stamp's key: what is measured (a new unit is not measured again)
    stamped(
        name="GPU verdict: GPUs, NVLink, P2P, NCCL all-reduce",
        command=verdict_run(s, layout),
        stamp=GPU_VERDICT_PROVEN,
        # The driver record too: a driver upgrade must be verified again even on the same runtime.
        key=with_key_of(
            hashlib.sha256(f"{command}|{DRIVER_RECORD}:{s.nvidia_driver_version}".encode()).hexdigest(),
            SWITCHED_STAMP,
        ),
        streamed=True,
    )
