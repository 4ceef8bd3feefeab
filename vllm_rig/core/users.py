"""The service's system user, made the same way by every stage that needs it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TypedDict

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.run import first_in_run
from vllm_rig.paths import Layout


def service_user(layout: Layout, gpu_groups: list[str]) -> None:
    """A system user with a home for its caches (HF, FlashInfer, Triton, torch extensions) and the groups
    that own /dev/nvidia* and /dev/dri where a distribution restricts them (only those that exist). The runtime
    and service stages each ask for it; a whole deploy reads it once."""
    if not first_in_run("service user", layout.service_user, layout.service_home, *gpu_groups):
        return
    system_user(
        name=f"System user {layout.service_user} (home {layout.service_home} holds its caches)",
        user=layout.service_user,
        home=layout.service_home,
        shell="/usr/sbin/nologin",
        groups=gpu_groups,
    )


# Own operation: pyinfra's server.user reads every account on the box (its Users fact runs id, groups and lastlog
# per account: 380-480 ms a read on the sandbox's 23 accounts, against 13-21 ms for SystemUser's one account,
# measured there), then the groups, the OS and the home directory: four commands on every re-run, not one.
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


# One user's account in one command (pyinfra's Users fact reads all of them; see system_user).
class Account(TypedDict):
    home: str
    shell: str
    groups: list[str]  # secondary groups, sorted
    home_owner: str | None  # "user:group" of the home directory; None when it is not there


class SystemUser(SectionFact[Account | None]):
    """The account of `user`; None when there is none."""

    DEFAULT: None = None

    def command(self, user: str) -> str:
        u = shlex.quote(user)
        return section_command(
            {
                "passwd": f"getent passwd {u}",
                "groups": f"id -nG {u} 2>/dev/null",
                "primary": f"id -ng {u} 2>/dev/null",
                "home_owner": f'stat -c "%U:%G" "$(getent passwd {u} | cut -d: -f6)" 2>/dev/null',
            }
        )

    def parse(self, sections: Sections) -> Account | None:
        entry = (sections.first("passwd") or "").split(":")
        if len(entry) != 7:
            return None
        primary = sections.first("primary") or ""
        return {
            "home": entry[5],
            "shell": entry[6],
            "groups": sorted(set((sections.first("groups") or "").split()) - {primary}),
            "home_owner": sections.first("home_owner"),
        }
