"""A unit's load, active and enablement state in one command."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase


class UnitState(FactBase):
    def command(self, unit: str) -> str:
        props = "-p LoadState -p ActiveState -p SubState -p UnitFileState -p Result"
        return f"systemctl show {props} {shlex.quote(unit)}"

    def process(self, output: list[str]) -> dict[str, Any]:
        return dict(line.split("=", 1) for line in output if "=" in line)
