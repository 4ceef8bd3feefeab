"""Checks that fail a host with one line at execute time, after the steps before them ran."""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation


# Own operation: pyinfra has none that fails a host with a line for the owner at execute time.
@operation(is_idempotent=True)
def require(problem: Callable[[], str | None]):
    """`problem()` is evaluated when the operation runs; a non-empty answer fails this host with it."""
    found = problem()
    if not found:
        host.noop("check passed")
        return
    yield FunctionCommand(fail_host, (found,), {})


def fail_host(state, host, message: str) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    """A FunctionCommand body that fails this host with one readable line (no traceback)."""
    logger.error(f"[{host.name}] {message}")
    return False
