"""Lines an owner reads last: under a wrapper that defers them (vllm_rig/cli/pyinfra_run.py, which bin/deploy
and bin/rig run), they print after pyinfra's own output, its results table included; under plain pyinfra,
where they are said (pyinfra's logger), as before."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyinfra import host, logger, state
from pyinfra.api import operation

_deferred: list[str] | None = None


def defer() -> None:
    """From now on say() keeps its lines for take()."""
    global _deferred
    _deferred = []


def say(line: str) -> None:
    if _deferred is None:
        logger.info(line)
    else:
        _deferred.append(line)


# Own operation: pyinfra's python.call counts as a change on every run; saying lines changes nothing.
@operation(is_idempotent=True)
def lines_said(lines: tuple[str, ...] | Callable[[], Iterable[str]]):
    """Lines for the owner, said last when the operation runs (a callable: made then, from the run's state)."""
    if state.is_executing:
        for line in lines() if callable(lines) else lines:
            say(f"[{host.name}] {line}")
    host.noop("said")
    return
    yield  # an operation is a generator, also one that yields nothing


def take() -> list[str]:
    """The deferred lines, in the order said; empties the list."""
    lines = list(_deferred or [])
    if _deferred is not None:
        _deferred.clear()
    return lines
