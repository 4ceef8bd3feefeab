"""The run layer: every host's settings checked at once before anything touches a host, then each stage given
its host's settings (tasks/<stage>.py calls run_stage)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable

from pyinfra import host, logger, state
from pyinfra.context import ctx_state

from vllm_rig import host_settings
from vllm_rig.core import become, heartbeat, run_summary
from vllm_rig.core.facts import FactUnreadable
from vllm_rig.settings import Settings, plain_http_warnings
from vllm_rig.stages.front import check as front_check
from vllm_rig.stages.locks import first_use
from vllm_rig.validation import SettingsError, load_settings

_validated: dict[str, Settings] = {}
_locks_ok: list[bool] = []  # once per run: whether every host has its locks
_locks_guard = threading.Lock()


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
    if not lines:
        lines += _front_lines()
    if lines:
        _validated.clear()
        for line in lines:
            logger.error(line)
        sys.exit(1)
    host_settings.record(_validated)
    for line in plain_http_warnings(_validated):  # allowed (allow_plain_http_mirrors), so said on every run
        logger.warning(line)
    # The run's own bookkeeping, before any operation runs: a line while a long one is quiet, and each
    # stage's time and changes for the summary (tasks/summary.py).
    heartbeat.install(ctx_state.get())
    run_summary.install(ctx_state.get())


def _front_lines() -> list[str]:
    """front_of's check across boxes (a box outside --limit is read from the inventory, not touched)."""

    def settings_of(name: str) -> Settings | str:
        if name in _validated:
            return _validated[name]
        try:
            outside = load_settings(state.inventory.get_host(name).data.dict())
        except SettingsError as err:
            return err.lines[0]
        host_settings.record_outside(name, outside)
        return outside

    def address_of(name: str) -> str:  # where the deploy reaches it: where the front dials it
        return str(state.inventory.get_host(name).data.get("ssh_hostname") or name)

    names = [h.name for h in state.inventory]
    return [
        f"[{name}] {line}"
        for name, s in _validated.items()
        for line in front_check.problems(name, s, names, settings_of, address_of)
    ]


def ensure_locks() -> None:
    """Every host's hashed install locks (locks_dir), before anything touches a host: one that is missing is
    written here on first use and said loudly (vllm_rig/stages/locks/first_use.py); one that cannot be written,
    or is not fully hashed, is one line per host and stops the run. Nothing is installed by version alone."""
    stop_on_bad_settings()
    # pyinfra loads the deploy file for every host at once, in greenlets (its gevent patches threading's lock):
    # while the first host writes a lock (uv and git are subprocesses, so it yields), the others wait here
    # instead of planning a build without it.
    with _locks_guard:
        if not _locks_ok:
            _locks_ok.append(_write_missing_locks())
    if not _locks_ok[0]:
        sys.exit(1)


def _write_missing_locks() -> bool:
    outcome = first_use.ensure(_validated)
    for line in outcome.written:
        logger.warning(line)
    for line in outcome.problems:
        logger.error(line)
    return not outcome.problems


def settings() -> Settings:
    """The current host's settings (validated; stages call this instead of reading host.data)."""
    if host.name not in _validated:
        stop_on_bad_settings()
    become.decide(host)  # root without sudo: sudo off before the first fact (once per host)
    return _validated[host.name]


def run_stage(stage: Callable[..., object]) -> None:
    """A stage's entry (tasks/<stage>.py): the stage with this host's settings. A fact that could not read
    this host's output has printed its one line and failed the host (vllm_rig/core/facts.py); the stage
    stops planning for it there, and the other hosts go on."""
    s = settings()
    with contextlib.suppress(FactUnreadable):
        stage(s)
