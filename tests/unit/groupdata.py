"""Read group_data files the way pyinfra does: top-level names, without imports or _private ones."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

GROUP_DATA = Path(__file__).resolve().parents[2] / "group_data"


def group_data(name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile((GROUP_DATA / f"{name}.py").read_text(), f"{name}.py", "exec"), namespace)
    return {
        key: value
        for key, value in namespace.items()
        if not key.startswith("_") and not isinstance(value, types.ModuleType)
    }


def profile_data(profile: str | None = None) -> dict[str, Any]:
    """all.py, with a profile group's file on top (as pyinfra merges them for a host in that group)."""
    data = group_data("all")
    if profile:
        data.update(group_data(profile))
    return data


# The commit of triton v3.5.1 is not recorded (vllm_rig/known/git_tags.py): a compile host gives its sources with it,
# as this stand-in commit does.
TRITON_KERNELS_STANDIN = "5" * 40


def compile_sources(version: str) -> dict[str, dict[str, Any]]:
    """upstream_compile_sources for a recorded release: its CMake's own, triton_kernels at the stand-in commit."""
    from vllm_rig.known import upstream_compile

    known = (upstream_compile.SDISTS.get(version) or upstream_compile.SDISTS["0.26.0"]).sources
    return {**known, "triton_kernels": {**known["triton_kernels"], "ref": TRITON_KERNELS_STANDIN}}
