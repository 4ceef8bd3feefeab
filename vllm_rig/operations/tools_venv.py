"""The tools venv (<install_root>/tools/venv) with one pinned package, checked with one remote command."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.facts.venv import ToolsVenv
from vllm_rig.operations.packages import APT_INSTALL


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
