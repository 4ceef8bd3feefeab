"""Many files' state in one remote command: sha256, mode, owner (None where missing)."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase


class FilesState(FactBase):
    def command(self, paths: tuple[str, ...]) -> str:
        # One line per path: "<path>\t<sha256>\t<mode> <user> <group>", or "<path>\t-" when missing.
        script = (
            'for p in "$@"; do if [ -f "$p" ]; then '
            'printf "%s\\t%s\\t%s\\n" "$p" "$(sha256sum "$p" | cut -d" " -f1)" "$(stat -c "%a %U %G" "$p")"; '
            'else printf "%s\\t-\\n" "$p"; fi; done'
        )
        return f"sh -c {shlex.quote(script)} files " + " ".join(shlex.quote(p) for p in paths)

    def process(self, output: list[str]) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for line in output:
            parts = line.split("\t")
            if len(parts) == 2 and parts[1] == "-":
                state[parts[0]] = None
            elif len(parts) == 3 and len(parts[2].split()) == 3:
                mode, user, group = parts[2].split()
                state[parts[0]] = {"sha256": parts[1], "mode": mode, "user": user, "group": group}
        return state
