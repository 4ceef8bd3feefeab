"""The vLLM service unit's contents, computed from settings; templates/vllm.service.j2 beside it lays them out.

The default profile reproduces the first seed's unit: its Environment= lines in its order, its
ExecStartPre check, its flags, Restart=always, RestartSec=10, TimeoutStartSec=900; the log file is an
option (the journal by default). Paths, the user and names come from settings and the layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from vllm_rig.core.systemd_quote import quote_word
from vllm_rig.paths import GUARD_UNIT, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.service.command import server_args, visible_devices

TEMPLATE = Path(__file__).resolve().parent / "templates" / "vllm.service.j2"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Directives a CUDA service tolerates: it needs /dev/nvidia* (no PrivateDevices) and writable JIT
# memory (no MemoryDenyWriteExecute); everything else it does not use is closed.
HARDENING = (
    "NoNewPrivileges=yes",
    "PrivateTmp=yes",
    "ProtectSystem=full",
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


def environment(s: Settings, layout: Layout) -> list[tuple[str, str]]:
    """Environment= lines in the seed's order: toolchain, FlashQLA, HF endpoint, GPUs, SM75 switches."""
    env = [
        ("CUDA_HOME", s.cuda_home),
        ("PATH", f"{s.cuda_home}/bin:{layout.venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LD_LIBRARY_PATH", f"{s.cuda_home}/lib64:{s.cuda_home}/lib64/stubs"),
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
    # Stable, writable cache homes so JIT work survives restarts (FlashQLA, FlashInfer, Triton).
    env += [("HOME", layout.service_home), ("TORCH_EXTENSIONS_DIR", layout.torch_extensions_dir)]
    return env


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


def unit_context(s: Settings, layout: Layout) -> dict[str, Any]:
    """Template variables for templates/vllm.service.j2 (pyinfra's files.template takes them as kwargs)."""
    return {
        "served_model_name": s.served_model_name,
        "model_repo": s.model_repo,
        "tensor_parallel_size": s.tensor_parallel_size,
        "guard_unit": GUARD_UNIT,
        "user": s.service_user,
        "working_directory": layout.fork_src,
        "environment": [(name, quote_word(value)) for name, value in environment(s, layout)],
        "env_file": layout.env_file,
        "exec_start_pre": layout.flashinfer_check,
        "exec_start": exec_start_lines(s, layout),
        "restart_sec": s.service_restart_sec,
        "timeout_start_sec": s.service_start_timeout_s,
        "log_file": s.vllm_log_file,
        "hardening": HARDENING,
    }


def render_unit(s: Settings, layout: Layout) -> str:
    """The unit text, rendered the way pyinfra's files.template renders it (jinja2, StrictUndefined)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    return env.from_string(TEMPLATE.read_text()).render(**unit_context(s, layout))
