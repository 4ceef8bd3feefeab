"""One user's account in one command: pyinfra's server.user reads every account on the box (Users runs
lastlog for each, ~160 ms) plus the groups file and the home directory, each in its own command."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

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
