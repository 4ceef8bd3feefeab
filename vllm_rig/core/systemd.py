"""A unit's load, active and enablement state in one command."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command


class UnitState(SectionFact[dict[str, str]]):
    """The unit's LoadState, ActiveState, SubState, UnitFileState and Result (those systemctl printed)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        props = "-p LoadState -p ActiveState -p SubState -p UnitFileState -p Result"
        return section_command({"show": f"systemctl show {props} {shlex.quote(unit)}"})

    def parse(self, sections: Sections) -> dict[str, str]:
        return dict(line.split("=", 1) for line in sections.lines("show") if "=" in line)


def said_on_failure(command: str, when_it_fails: str | None) -> str:
    """`command`, failing as before, but running `when_it_fails` first (one line on why, for the owner)."""
    if not when_it_fails:
        return command
    return f"{command} || {{ {when_it_fails}; exit 1; }}"


# A systemd unit enabled and started, read with one command (pyinfra's systemd.service uses two).
# `when_it_fails`: a command run when the start fails, before the operation fails (it says why).
@operation()
def unit_enabled_and_started(unit: str, when_it_fails: str | None = None):
    state = host.get_fact(UnitState, unit=unit)
    commands = []
    if state.get("UnitFileState") != "enabled":
        commands.append(f"systemctl enable {shlex.quote(unit)}")
    if state.get("ActiveState") != "active":
        commands.append(said_on_failure(f"systemctl start {shlex.quote(unit)}", when_it_fails))
    if not commands:
        host.noop(f"{unit} is enabled and active")
        return
    yield from commands


# The opposite, for a unit a setting turns off: disabled and stopped, or a no-op when it is not there.
@operation()
def unit_disabled_and_stopped(unit: str):
    state = host.get_fact(UnitState, unit=unit)
    commands = []
    if state.get("UnitFileState") in ("enabled", "enabled-runtime"):
        commands.append(f"systemctl disable {shlex.quote(unit)}")
    if state.get("ActiveState") in ("active", "activating", "reloading"):
        commands.append(f"systemctl stop {shlex.quote(unit)}")
    if not commands:
        host.noop(f"{unit} is disabled and stopped")
        return
    yield from commands
