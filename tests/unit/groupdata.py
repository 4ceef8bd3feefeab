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
