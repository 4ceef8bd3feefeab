"""Lines an owner reads last: under a wrapper that defers them (vllm_rig/cli/pyinfra_run.py, which bin/deploy
and bin/rig run), they print after pyinfra's own output, its results table included; under plain pyinfra,
where they are said (pyinfra's logger), as before."""

from __future__ import annotations

from pyinfra import logger

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


def take() -> list[str]:
    """The deferred lines, in the order said; empties the list."""
    lines = list(_deferred or [])
    if _deferred is not None:
        _deferred.clear()
    return lines
