"""The service's start, which says why when it fails: every other unit goes through pyinfra's systemd.service."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command


class UnitState(SectionFact[dict[str, str]]):
    """The unit's LoadState, ActiveState, SubState, UnitFileState and Result (those systemctl printed)."""

    DEFAULT: dict[str, str] = {}

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


# Own operation: pyinfra's systemd.service cannot run a command when the start fails (here the server's own
# error line and the put-back of the unit that served last). `when_it_fails` runs before the operation fails.
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
