"""The vLLM service unit's contents, computed from settings; templates/vllm.service.j2 beside it lays them out.

The default profile reproduces the first seed's unit: its Environment= lines in its order, its
ExecStartPre check, its flags, Restart=always, RestartSec=10, TimeoutStartSec=900; the log file is an
option (the journal by default). Paths, the user and names come from settings and the layout.

Beyond the seed, every start waits for free GPUs (ExecStartPre, vllm_rig/host/gpu_wait.py) and is proven
(ExecStartPost, vllm_rig/host/start_check.py). Why ExecStartPost and not a oneshot unit with
BindsTo=/PartOf=: systemd keeps a unit "activating" until its ExecStartPost= commands exit, so
`systemctl start`, a boot and anything ordered After= it wait for a proven server; a failing check fails
that start itself, so Restart=always restarts it and systemd counts the restarts (NRestarts, reset by a
start by hand) that bound it; and the check dies with the unit. A separate oneshot would see the service
"active" before any proof, PartOf=/BindsTo= carry stops and restarts from the service to the check, not
back, so it would have to restart the service itself, outside systemd's counters. The cost: all three
share TimeoutStartSec, so the check gets what the GPU wait leaves of it (check_timeout()).
Both run as root ("+"): they query nvidia-smi for every process and write /var/lib/vllm-rig.
"""

from __future__ import annotations

import hashlib
from typing import Any

from vllm_rig import paths
from vllm_rig.core.files import render_template
from vllm_rig.core.systemd_quote import env_file_text, quote_word
from vllm_rig.known import fork_interface
from vllm_rig.paths import GUARD_UNIT, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import kinds
from vllm_rig.stages.service.command import server_args, thinking_budget_env, visible_devices

TEMPLATE = "service/vllm.service.j2"  # templates/service/
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Directives a CUDA service tolerates: it needs /dev/nvidia* (no PrivateDevices) and writable JIT
# memory (no MemoryDenyWriteExecute); everything else it does not use is closed.
# What every unit of the rig closes whatever it runs (the chat page's unit adds its own before these).
CLOSED = (
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "RestrictNamespaces=yes",
    "LockPersonality=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
)
HARDENING = ("NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=full", *CLOSED)


def environment(s: Settings, layout: Layout) -> list[tuple[str, str]]:
    """Environment= lines in the seed's order: toolchain, FlashQLA, HF endpoint, GPUs, SM75 switches."""
    cuda = kinds.of(s).cuda_home(s, layout.current)  # the toolkit the server's JIT compiles with
    env = [
        ("CUDA_HOME", cuda),
        ("PATH", f"{cuda}/bin:{layout.venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LD_LIBRARY_PATH", f"{cuda}/lib64:{cuda}/lib64/stubs"),
        ("PYTHONPATH", layout.flashqla_src),
        ("HF_ENDPOINT", s.hf_endpoint),
    ]
    devices = visible_devices(s)
    if devices is not None:
        env.append(("CUDA_VISIBLE_DEVICES", devices))  # the seed's --device-ids, as the fork's line spells it
    extra = dict(s.vllm_env)
    if s.omp_num_threads is not None:
        # The seed sets OMP_NUM_THREADS right after its first SM75 switch; keep that order.
        items = list(extra.items())
        items.insert(min(1, len(items)), ("OMP_NUM_THREADS", str(s.omp_num_threads)))
        extra = dict(items)
    env += list(extra.items())
    budget = thinking_budget_env(s)
    if budget is not None:
        # The fork's chat server gives this budget to every request that sends none of its own.
        env.append((fork_interface.THINKING_BUDGET_ENV, budget))
    # Stable, writable cache homes so JIT work survives restarts (FlashQLA, FlashInfer, Triton).
    env += [("HOME", layout.service_home), ("TORCH_EXTENSIONS_DIR", layout.torch_extensions_dir)]
    return env


def environment_file(s: Settings, layout: Layout) -> str:
    """The root-only EnvironmentFile= holding environment(): a value of vllm_env may be a secret off the naming
    convention (OPENAI_APIKEY, a URL with user:password@), and the unit is world-readable."""
    head = "# Rendered by vllm-rig from settings (the server's environment); edits here are overwritten.\n"
    return head + env_file_text(environment(s, layout))


def exec_start_lines(s: Settings, layout: Layout) -> list[str]:
    """ExecStart as lines: the interpreter and module, then one flag (with its value) per line."""
    words = [quote_word(w) for w in server_args(s, model_path=s.model_dir)]
    lines = [f"{quote_word(layout.python)} -m {SERVER_MODULE}"]
    for word in words:
        if word.startswith("--") or not lines[1:]:
            lines.append(word)
        else:
            lines[-1] += f" {word}"
    return lines


HOST_PYTHON = "/usr/bin/python3"  # the host package is stdlib only


def check_timeout(s: Settings) -> int:
    """Seconds the start check may wait for /health: what TimeoutStartSec leaves after the GPU wait."""
    return max(s.service_start_timeout_s - s.gpu_wait_timeout_s - 30, 30)


def probe_args(s: Settings, layout: Layout) -> list[str]:
    """What service_probe.py, start_check.py and watchdog.py are told about the server."""
    return [
        "--base-url",
        f"http://127.0.0.1:{s.vllm_port}",
        "--model",
        s.served_model_name,
        "--env-file",
        layout.env_file,
    ]


def server_gone_command(s: Settings, layout: Layout) -> str:
    """After a start or restart of the server that failed: one line on why (the unit failed or the server
    exited, with its last error line from the journal), so the host fails with it, not with systemctl's
    "Job ... failed"."""
    return f"python3 {layout.host_package} server_gone --unit {s.service_name}.service"


def gpu_wait_command(s: Settings, layout: Layout) -> str:
    devices = "all" if s.device_ids is None else ",".join(str(i) for i in s.device_ids)
    words = [HOST_PYTHON, layout.host_package, "gpu_wait", "--devices", devices]
    words += ["--max-used-mib", str(s.gpu_wait_max_used_mib), "--graphics-max-mib", str(s.gpu_wait_graphics_max_mib)]
    words += ["--timeout", str(s.gpu_wait_timeout_s)]
    return "+" + " ".join(quote_word(w) for w in words)


def kv_key(s: Settings, layout: Layout) -> str:
    """What the recorded KV cache size belongs to: the server's command and environment. Another model or
    other memory flags make another pool size, which is a new record, not a shrunken cache."""
    text = "\n".join([*exec_start_lines(s, layout), *(f"{k}={v}" for k, v in environment(s, layout))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def start_check_command(s: Settings, layout: Layout) -> str:
    words = [HOST_PYTHON, layout.host_package, "start_check", "--unit", f"{s.service_name}.service"]
    words += probe_args(s, layout)
    words += ["--timeout", str(check_timeout(s)), "--attempts", str(s.start_check_attempts)]
    words += ["--needle-words", str(s.start_check_needle_words)]
    words += ["--kv-shrink-share", repr(float(s.start_check_kv_shrink_share)), "--kv-key", kv_key(s, layout)]
    words += ["--result", paths.START_CHECK_RESULT]
    if s.vllm_log_file:
        words += ["--log-file", s.vllm_log_file]
    return "+" + " ".join(quote_word(w) for w in words)


def watchdog_command(s: Settings, layout: Layout) -> str:
    words = [HOST_PYTHON, layout.host_package, "watchdog", "--unit", f"{s.service_name}.service"]
    words += probe_args(s, layout)
    words += ["--failures", str(s.watchdog_failures), "--max-restarts", str(s.watchdog_max_restarts)]
    words += ["--timeout", str(s.watchdog_timeout_s), "--result", paths.WATCHDOG_RESULT]
    return " ".join(quote_word(w) for w in words)


def watchdog_units(s: Settings, layout: Layout) -> tuple[str, str]:
    """(the watchdog's .service, its .timer)."""
    service = render_template(
        "service/watchdog.service.j2",
        service=f"{s.service_name}.service",
        exec_start=watchdog_command(s, layout),
        timeout_start_sec=s.watchdog_timeout_s * 3 + 60,
    )
    return service, render_template("service/watchdog.timer.j2", interval_s=s.watchdog_interval_s)


def unit_context(s: Settings, layout: Layout) -> dict[str, Any]:
    """Template variables for templates/vllm.service.j2 (pyinfra's files.template takes them as kwargs)."""
    return {
        "served_model_name": s.served_model_name,
        "model_repo": s.model_repo,
        "tensor_parallel_size": s.tensor_parallel_size,
        "guard_unit": GUARD_UNIT,
        "user": s.service_user,
        "working_directory": kinds.of(s).working_directory(layout),
        "environment_file": layout.environment_file,
        # The unit changes whenever the environment does: every restart and proof keyed on the unit follows it.
        "environment_sha256": hashlib.sha256(environment_file(s, layout).encode()).hexdigest(),
        "env_file": layout.env_file,
        "exec_start_pre": layout.flashinfer_check,
        "gpu_wait": gpu_wait_command(s, layout),
        "start_check": start_check_command(s, layout),
        "exec_start": exec_start_lines(s, layout),
        "restart_sec": s.service_restart_sec,
        "timeout_start_sec": s.service_start_timeout_s,
        "log_file": s.vllm_log_file,
        "hardening": HARDENING,
    }


def render_unit(s: Settings, layout: Layout) -> str:
    """The unit text, rendered the way pyinfra's files.template renders it (jinja2, StrictUndefined)."""
    return render_template(TEMPLATE, **unit_context(s, layout))
