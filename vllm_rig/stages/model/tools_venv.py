"""The tools venv (<install_root>/tools/venv) with one pinned package, checked with one remote command."""

from __future__ import annotations

import hashlib
import re
import shlex
from typing import TypedDict

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.packages import APT_INSTALL


# Own operation: pyinfra's pip.packages(requirements=...) runs pip install on every run and pip.venv plus apt
# cost three reads; this one compares the installed lock's digest, all in one command.
@operation()
def tools_venv(path: str, package: str, version: str, lock: str, index_url: str | None = None):
    """python3-venv from apt, the venv from the system python3, and exactly the hashed lock in it (`lock`, the
    text of the tools lock: `package==version` and its closure, each file's sha256)."""
    found = host.get_fact(ToolsVenv, path=path, package=package)
    lock_sha = hashlib.sha256(lock.encode()).hexdigest()
    if found["python3_venv"] and found["python"] and found["version"] == version and found["lock"] == lock_sha:
        host.noop(f"{path} holds {package} {version} from its hashed lock")
        return
    if not found["python3_venv"]:
        # This runs before the driver stage refreshes the lists: refresh them here only when apt cannot find it.
        yield f"{APT_INSTALL} python3-venv || {{ apt-get -q update && {APT_INSTALL} python3-venv; }}"
    if not found["python"]:
        yield f"python3 -m venv {shlex.quote(path)}"
    index = f" --index-url {shlex.quote(index_url)}" if index_url else ""
    pip = shlex.quote(f"{path}/bin/pip")
    lock_file, marker = shlex.quote(f"{path}/{LOCK_FILE}"), shlex.quote(f"{path}/{LOCK_MARK}")
    yield f"printf %s {shlex.quote(lock)} > {lock_file}"
    # --require-hashes: a file whose sha256 the lock does not hold is refused before anything is installed.
    install = f"{pip} install -q{index} --require-hashes --no-deps -r {lock_file}"
    yield f"PIP_DISABLE_PIP_VERSION_CHECK=1 {install} && echo {lock_sha} > {marker}"


LOCK_FILE = "vllm-rig-lock.txt"
LOCK_MARK = "vllm-rig-lock.sha256"  # written once the lock installed: the lock this venv holds


# A small venv for host tools, read in one command: is python3-venv installed, is the venv there, and which
class Venv(TypedDict):
    python3_venv: bool  # Debian's python3-venv is installed
    python: str | None  # the venv's python version (pyvenv.cfg); None when there is no venv
    version: str | None  # the package's version in it
    lock: str | None  # the sha256 of the lock installed in it


class ToolsVenv(SectionFact[Venv]):
    DEFAULT: Venv = {"python3_venv": False, "python": None, "version": None, "lock": None}

    def command(self, path: str, package: str) -> str:
        # Read from files instead of starting the venv's python twice (~25 ms each, on every re-run): pyvenv.cfg
        # names the python version, the package's dist-info its version.
        venv = shlex.quote(path)
        dist = re.sub(r"[-_.]+", "_", package).lower()  # the dist-info directory's spelling of the name
        return section_command(
            {
                "venv_pkg": "dpkg-query -W -f='${Status}\\n' python3-venv 2>/dev/null",
                "python": f"[ -x {venv}/bin/python ] && sed -n 's/^version *= *//p' {venv}/pyvenv.cfg 2>/dev/null",
                "version": (
                    f"for d in {venv}/lib/python*/site-packages/{dist}-*.dist-info; do "
                    "sed -n 's/^Version: //p' \"$d/METADATA\" 2>/dev/null; done"
                ),
                "lock": f"cat {venv}/{LOCK_MARK} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> Venv:
        return {
            "python3_venv": (sections.first("venv_pkg") or "").endswith("installed"),
            "python": sections.first("python"),
            "version": sections.first("version"),
            "lock": sections.first("lock"),
        }
