"""The host programs as the hosts get them: `program(name)` is the argv that runs one from the same zip the
deploy uploads (vllm_rig.core.host_package), so a test of a program also tests its packaging."""

from __future__ import annotations

import sys
import tempfile
from functools import cache
from pathlib import Path

from vllm_rig.core.host_package import zip_bytes


@cache
def package() -> Path:
    """The zip, written once per test session."""
    path = Path(tempfile.mkdtemp(prefix="vllm-rig-host-")) / "vllm-rig-host.pyz"
    path.write_bytes(zip_bytes())
    return path


def program(name: str, python: str = sys.executable) -> list[str]:
    return [python, str(package()), name]
