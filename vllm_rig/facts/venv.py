"""A small venv for host tools, read in one command: is python3-venv installed, is the venv there, and which
version of one package it holds."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.facts.host import split_sections


class ToolsVenv(FactBase):
    def command(self, path: str, package: str) -> str:
        python = shlex.quote(f"{path}/bin/python")
        probe = f"import importlib.metadata as m; print(m.version({package!r}))"
        script = (
            "echo @@venv_pkg; dpkg-query -W -f='${Status}\\n' python3-venv 2>/dev/null || true; "
            f"echo @@python; [ -x {python} ] && {python} -c 'import sys; print(sys.version.split()[0])' 2>/dev/null "
            "|| true; "
            f"echo @@version; [ -x {python} ] && {python} -c {shlex.quote(probe)} 2>/dev/null || true"
        )
        return "sh -c " + shlex.quote(script)

    def process(self, output: list[str]) -> dict[str, Any]:
        raw = split_sections(output)

        def first(key: str) -> str | None:
            return next((line.strip() for line in raw.get(key, []) if line.strip()), None)

        return {
            "python3_venv": (first("venv_pkg") or "").endswith("installed"),
            "python": first("python"),
            "version": first("version"),
        }
