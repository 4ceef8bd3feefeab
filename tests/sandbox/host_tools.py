"""The programs the sandbox runs on this machine, and the Debian package of each (host-packages.txt).

`up` asks first, so a machine without them gets one line naming what to install, not a traceback
from the first subprocess that cannot find its program.
"""

from __future__ import annotations

import os
import shutil

# program -> the package that ships it
PROGRAMS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "zstd": "zstd",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dpkg-deb": "dpkg",
    "gpg": "gnupg",
    "git": "git",
    "nginx": "nginx",  # the file server and the shared runtime artifact store (fixtures/)
    "fcgiwrap": "fcgiwrap",  # runs git http-backend for nginx (fixtures/fileserver.py)
    "openssl": "openssl",  # its https side's local CA
}
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


def find(program: str) -> str:
    """The program's path (root's sbin directories included), or SystemExit with the package to install."""
    found = shutil.which(program, path=f"{os.environ.get('PATH', '')}:{SBIN}")
    if found is None:
        raise SystemExit(f"{program} is not installed: run 'sudo apt-get install {PROGRAMS[program]}'")
    return found


def missing(path: str | None = None) -> list[str]:
    """Packages whose program is not on PATH (plus the sbin directories root has), in a stable order."""
    search = f"{path if path is not None else os.environ.get('PATH', '')}:{SBIN}"
    return sorted({pkg for prog, pkg in PROGRAMS.items() if shutil.which(prog, path=search) is None})


def problem(path: str | None = None) -> str | None:
    """One line saying what to install, or None when everything is there."""
    need = missing(path)
    if not need:
        return None
    return (
        f"the sandbox needs {', '.join(need)} on this machine: run 'sudo apt-get install {' '.join(need)}' "
        "(bin/deploy and bin/test --all install them for you)"
    )
