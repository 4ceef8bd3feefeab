"""What every stage needs: the current host's validated settings, checked for all hosts at once."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyinfra import host, logger, state

from vllm_rig.core import become
from vllm_rig.core.facts import FactUnreadable
from vllm_rig.settings import Settings
from vllm_rig.validation import SettingsError, load_settings

if TYPE_CHECKING:
    from pyinfra.api.host import Host as Host_

    from vllm_rig.stages.preflight.facts import Host

_validated: dict[str, Settings] = {}
_host_states: dict[str, Host | None] = {}


def stop_on_bad_settings() -> None:
    """Validate every host's settings; on any problem print one line each and stop the run.

    Runs while pyinfra prepares the first host, before any operation or fact touches a host.
    """
    if _validated:
        return
    lines: list[str] = []
    for each in state.inventory.iter_activated_hosts():
        try:
            _validated[each.name] = load_settings(each.data.dict())
        except SettingsError as err:
            lines += [f"[{each.name}] {line}" for line in err.lines]
    if lines:
        _validated.clear()
        for line in lines:
            logger.error(line)
        sys.exit(1)


def settings() -> Settings:
    """The current host's settings (validated; stages call this instead of reading host.data)."""
    if host.name not in _validated:
        stop_on_bad_settings()
    become.decide(host)  # root without sudo: sudo off before the first fact (once per host)
    return _validated[host.name]


def settings_of(other: Host_) -> Settings | None:
    """Another host's settings of this run (for a decision between hosts, e.g. which one serves the model)."""
    if not _validated:
        stop_on_bad_settings()
    return _validated.get(other.name)


def run_stage(stage: Callable[..., object]) -> None:
    """A stage's entry (tasks/<stage>.py): the stage with this host's settings. A fact that could not read
    this host's output has printed its one line and failed the host (vllm_rig/core/facts.py); the stage
    stops planning for it there, and the other hosts go on."""
    s = settings()
    with contextlib.suppress(FactUnreadable):
        stage(s)


def preflight_failed() -> bool:
    """This host's preflight verdict failed while the run was planned (tasks/preflight.py marks it): later
    stages plan nothing for it, so their facts never ask a host that will not be deployed."""
    return host in state.failed_hosts


def host_state() -> Host | None:
    """The batched HostState fact (OS, kernel, disk, GPUs on the bus...), read once per host per run:
    stages that need the OS or kernel share one remote command instead of each asking again."""
    from vllm_rig.stages.preflight.facts import HostState

    if host.name not in _host_states:
        _host_states[host.name] = host.get_fact(HostState, path=settings().install_root)
    return _host_states[host.name]
