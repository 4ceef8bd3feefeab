"""Root or sudo, decided per host from the host itself.

group_data/all.py runs every operation through sudo (its `_sudo` setting). A box reached as root (an SSH
root login, or `@local` run as root) may have no sudo at all: every fact would fail with "sudo: not
found". So before the first fact of a run, each host is asked `id -u` without sudo; when it is root,
sudo is switched off for that host. Commands the deploy runs itself (streamed probes) take the host's
setting through `sudo_args`, never a hard-coded one.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import StringCommand

_decided: dict[str, bool] = {}


def parse_uid(stdout: str) -> int | None:
    """The uid `id -u` printed, or None when it printed something else."""
    text = stdout.strip().splitlines()
    return int(text[-1]) if text and text[-1].strip().isdigit() else None


def decide(host: Any) -> bool:
    """Whether this host's operations go through sudo (read once per host per run). A root login
    needs none, so `_sudo` is turned off for it; a non-root login keeps what the settings say."""
    if host.name in _decided:
        return _decided[host.name]
    wants = bool(host.data.get("_sudo", False))
    if wants:
        ok, output = host.run_shell_command(StringCommand("id -u"), _sudo=False)
        if ok and parse_uid(output.stdout) == 0:
            host.data._sudo = False  # pyinfra keeps this as the host's override for every later operation
            # A @deploy already running took its arguments from the host data when it began; they win
            # over host data for the facts and operations inside it, so they are corrected too.
            if getattr(host, "current_deploy_kwargs", None):
                host.current_deploy_kwargs["_sudo"] = False
            wants = False
    _decided[host.name] = wants
    return wants


def sudo_args(host: Any) -> dict[str, bool]:
    """Connector arguments for a command run by hand (FunctionCommand): the host's own sudo setting."""
    return {"_sudo": decide(host)}
