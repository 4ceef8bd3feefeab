"""A systemd unit enabled and started, read with one command (pyinfra's systemd.service uses two)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.facts.systemd import UnitState


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
