"""A unit's load, active and enablement state in one command."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, operation


class UnitState(FactBase):
    def command(self, unit: str) -> str:
        props = "-p LoadState -p ActiveState -p SubState -p UnitFileState -p Result"
        return f"systemctl show {props} {shlex.quote(unit)}"

    def process(self, output: list[str]) -> dict[str, Any]:
        return dict(line.split("=", 1) for line in output if "=" in line)


# A systemd unit enabled and started, read with one command (pyinfra's systemd.service uses two).
@operation()
def unit_enabled_and_started(unit: str):
    state = host.get_fact(UnitState, unit=unit)
    commands = []
    if state.get("UnitFileState") != "enabled":
        commands.append(f"systemctl enable {shlex.quote(unit)}")
    if state.get("ActiveState") != "active":
        commands.append(f"systemctl start {shlex.quote(unit)}")
    if not commands:
        host.noop(f"{unit} is enabled and active")
        return
    yield from commands
