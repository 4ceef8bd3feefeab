"""The run as pyinfra holds it, for any stage."""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host, state
from pyinfra.context import ctx_host


def host_failed() -> bool:
    """This host failed while the run was planned (its preflight verdict, or a fact that could not read its
    output): later stages plan nothing for it, so their facts never ask a host that will not be deployed."""
    return host in state.failed_hosts


# What first_in_run was asked, per host (one Host object per run).
_planned: WeakKeyDictionary[Any, set[tuple[Any, ...]]] = WeakKeyDictionary()


def first_in_run(*what: Any) -> bool:
    """True the first time this run asks for `what` on the current host. An operation several stages each plan,
    so that each stage also runs alone (the host programs, the service user), is planned once in a whole deploy:
    the stages run in order and none undoes it."""
    asked = _planned.setdefault(ctx_host.get(), set())
    if what in asked:
        return False
    asked.add(what)
    return True
