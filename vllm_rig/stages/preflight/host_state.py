"""The batched HostState fact (OS, kernel, disk, GPUs on the bus...), read once per host per run: stages that
need the OS or kernel share one remote command instead of each asking again."""

from __future__ import annotations

from pyinfra import host

from vllm_rig.stages.preflight.facts import Host, HostState

_by_host: dict[str, Host | None] = {}


def host_state(install_root: str) -> Host | None:
    if host.name not in _by_host:
        _by_host[host.name] = host.get_fact(HostState, path=install_root)
    return _by_host[host.name]
