"""The runtime kinds on the control side, one module each (fork.py, upstream_wheel.py, upstream_compile.py), and
the registry that picks one for the settings. Adding a kind is one module here, one row below, its host build
program (vllm_rig/host/build_runtime.py's KINDS) and its settings rules (settings.KIND_RULES)."""

from __future__ import annotations

from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds import fork, upstream_compile, upstream_wheel
from vllm_rig.stages.runtime.kinds.base import RuntimeKind

KINDS: dict[str, RuntimeKind] = {k.name: k for k in (fork.KIND, upstream_wheel.KIND, upstream_compile.KIND)}


def of(s: Settings) -> RuntimeKind:
    """The kind these settings build (Settings.runtime: the one place that reads runtime_kind and upstream_build)."""
    return KINDS[s.runtime]
