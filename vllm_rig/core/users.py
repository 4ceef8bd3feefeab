"""The service's system user, made the same way by every stage that needs it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, operation

from vllm_rig.paths import Layout


def service_user(layout: Layout, gpu_groups: list[str]) -> None:
    """A system user with a home for its caches (HF, FlashInfer, Triton, torch extensions) and the groups
    that own /dev/nvidia* and /dev/dri where a distribution restricts them (only those that exist)."""
    system_user(
        name=f"System user {layout.service_user} (home {layout.service_home} holds its caches)",
        user=layout.service_user,
        home=layout.service_home,
        shell="/usr/sbin/nologin",
        groups=gpu_groups,
    )


@operation()
def system_user(user: str, home: str, shell: str, groups: Sequence[str]):
    """A system account with its home directory (owned by it) and exactly `groups` as secondary groups when
    any are given, read with one command (SystemUser) instead of server.user's five."""
    found = host.get_fact(SystemUser, user=user)
    q = shlex.quote
    group_list = ",".join(groups)
    if found is None:
        args = f"-r -m -d {q(home)} -s {q(shell)}" + (f" -G {q(group_list)}" if groups else "")
        # A group of the same name left behind by an earlier account becomes its primary group.
        yield (
            f"if getent group {q(user)} >/dev/null; then useradd {args} -g {q(user)} {q(user)}; "
            f"else useradd {args} {q(user)}; fi"
        )
        return
    changes = []
    if found["home"] != home:
        changes.append(f"-d {q(home)}")
    if found["shell"] != shell:
        changes.append(f"-s {q(shell)}")
    if groups and sorted(set(groups)) != found["groups"]:
        changes.append(f"-G {q(group_list)}")
    home_ok = found["home"] == home and found["home_owner"] == f"{user}:{user}"
    if not changes and home_ok:
        host.noop(f"user {user} exists with home {home}")
        return
    if changes:
        yield f"usermod {' '.join(changes)} {q(user)}"
    if not home_ok:
        yield f"mkdir -p {q(home)} && chown {q(user)}:{q(user)} {q(home)}"


# One user's account in one command: pyinfra's server.user reads every account on the box (Users runs
_SCRIPT = (
    'entry=$(getent passwd "$1") || exit 0; printf "%s\\n" "$entry"; '
    'printf "groups=%s\\n" "$(id -nG "$1")"; '
    'printf "primary=%s\\n" "$(id -ng "$1")"; '
    'printf "home_owner=%s\\n" "$(stat -c "%U:%G" "$(printf "%s" "$entry" | cut -d: -f6)" 2>/dev/null)"'
)


class SystemUser(FactBase):
    """{"home", "shell", "groups" (secondary), "home_owner" ("user:group" or None)}; None when absent."""

    def command(self, user: str) -> str:
        return f"sh -c {shlex.quote(_SCRIPT)} user {shlex.quote(user)}"

    def process(self, output: list[str]) -> dict[str, Any] | None:
        entry = output[0].split(":") if output else []
        if len(entry) != 7:
            return None
        fields = dict(line.split("=", 1) for line in output[1:] if "=" in line)
        primary = fields.get("primary", "")
        return {
            "home": entry[5],
            "shell": entry[6],
            "groups": sorted(set(fields.get("groups", "").split()) - {primary}),
            "home_owner": fields.get("home_owner") or None,
        }
