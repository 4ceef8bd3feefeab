"""Every host's validated settings of this run, by host name.

Filled once by the run layer (`vllm_rig.context.stop_on_bad_settings`) before any stage plans; read by a stage
that decides between hosts (which one serves the model to the others). On the settings floor, so stages read
it without importing the run layer above them.
"""

from __future__ import annotations

from vllm_rig.settings import Settings

_by_host: dict[str, Settings] = {}
_outside: dict[str, Settings] = {}  # hosts the run reads but does not deploy: a front's boxes outside --limit


def record(validated: dict[str, Settings]) -> None:
    _by_host.clear()
    _by_host.update(validated)


def of(name: str) -> Settings | None:
    """That host's settings in this run, or None when it is not in the run (or settings were not checked yet)."""
    return _by_host.get(name)


def record_outside(name: str, settings: Settings) -> None:
    _outside[name] = settings


def of_box(name: str) -> Settings | None:
    """A host's settings whether or not it is deployed in this run (a front's box outside --limit)."""
    return _by_host.get(name) or _outside.get(name)


def recorded() -> bool:
    return bool(_by_host)
