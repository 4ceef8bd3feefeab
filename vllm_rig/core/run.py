"""The run as pyinfra holds it, for any stage."""

from __future__ import annotations

from pyinfra import host, state


def host_failed() -> bool:
    """This host failed while the run was planned (its preflight verdict, or a fact that could not read its
    output): later stages plan nothing for it, so their facts never ask a host that will not be deployed."""
    return host in state.failed_hosts
