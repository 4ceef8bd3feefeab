"""A small venv for host tools, read in one command: is python3-venv installed, is the venv there, and which
version of one package it holds."""

from __future__ import annotations

import re
import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.facts.host import split_sections


class ToolsVenv(FactBase):
    def command(self, path: str, package: str) -> str:
        # Read from files instead of starting the venv's python twice (~25 ms each, on every re-run): pyvenv.cfg
        # names the python version, the package's dist-info its version.
        venv = shlex.quote(path)
        dist = re.sub(r"[-_.]+", "_", package).lower()  # the dist-info directory's spelling of the name
        script = (
            "echo @@venv_pkg; dpkg-query -W -f='${Status}\\n' python3-venv 2>/dev/null || true; "
            f"echo @@python; [ -x {venv}/bin/python ] && sed -n 's/^version *= *//p' {venv}/pyvenv.cfg 2>/dev/null; "
            f"echo @@version; for d in {venv}/lib/python*/site-packages/{dist}-*.dist-info; do "
            "sed -n 's/^Version: //p' \"$d/METADATA\" 2>/dev/null; done; true"
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
