"""The host-side scripts in vllm_rig/host/ as modules, for tests on the control side (they are uploaded alone and
run by the host's python, so they are not importable as a package)."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

FILES = Path(__file__).resolve().parents[1] / "vllm_rig" / "host"


@cache
def runtime_build() -> ModuleType:
    """vllm_rig/host/runtime_build.py, loaded once."""
    spec = importlib.util.spec_from_file_location("runtime_build", FILES / "runtime_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
