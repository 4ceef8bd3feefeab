"""The tools venv (<install_root>/tools/venv) with one pinned package, checked with one remote command."""

from __future__ import annotations

import re
import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, operation

from vllm_rig.core.facts import split_sections
from vllm_rig.core.packages import APT_INSTALL


@operation()
def tools_venv(path: str, package: str, version: str, index_url: str | None = None):
    """python3-venv from apt, the venv from the system python3, and exactly `package==version` in it."""
    found = host.get_fact(ToolsVenv, path=path, package=package)
    if found["python3_venv"] and found["python"] and found["version"] == version:
        host.noop(f"{path} holds {package} {version}")
        return
    if not found["python3_venv"]:
        yield f"{APT_INSTALL} python3-venv"
    if not found["python"]:
        yield f"python3 -m venv {shlex.quote(path)}"
    index = f" --index-url {shlex.quote(index_url)}" if index_url else ""
    pip = shlex.quote(f"{path}/bin/pip")
    yield f"PIP_DISABLE_PIP_VERSION_CHECK=1 {pip} install -q{index} {shlex.quote(f'{package}=={version}')}"


# A small venv for host tools, read in one command: is python3-venv installed, is the venv there, and which
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
