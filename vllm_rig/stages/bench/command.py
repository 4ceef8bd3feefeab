"""The bench command (tasks/bench.py, and the guarded update's two runs), apart from the charts' matplotlib."""

from __future__ import annotations

import shlex

from vllm_rig.paths import Layout
from vllm_rig.settings import Settings


def bench_command(s: Settings, layout: Layout, label: str, out: str) -> str:
    """bench run against the service, every word quoted: served_model_name and install_root reach it. The tools
    venv's python: bench reads /metrics with its prometheus_client (stages/model/start.py ensure_tools_venv)."""
    return shlex.join(
        [layout.tools_python, layout.host_package, "bench", "run", "--base-url", f"http://127.0.0.1:{s.vllm_port}"]
        + ["--model", s.served_model_name, "--api-key-file", layout.env_file, "--sizes", s.bench_sizes]
        + ["--label", label, "--json-out", out]
    )
