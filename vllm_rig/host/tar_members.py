"""A tar archive from a store nobody vouches for byte by byte, checked member by member before anything
touches the disk, then laid down by hand into a fresh directory.

tarfile's own extraction is not used: Debian 12's Python (3.11.2) has no extraction filters, and the `tar`
filter of later ones does not check hard-link targets. Allowed: regular files, directories, and symlinks
whose target stays inside the tree (relative, no `..` after a name) or, for the venv's interpreter links
only, an absolute path to a distribution Python. Refused: hard links, devices, FIFOs, sparse files,
absolute names, `.`/`..`/empty components, a name given twice, a member below a symlink or a file.
Files are written with O_EXCL|O_NOFOLLOW, owned by whoever unpacks, without setuid/setgid or group/other
write. Standard library only.
"""

from __future__ import annotations

import os
import posixpath
import re
import tarfile
from pathlib import Path

CHUNK = 1 << 20
# venv/bin/python -> /usr/bin/python3.12, as `python3.12 -m venv` makes it
INTERPRETER_LINK = re.compile(r"venv/bin/python[0-9.]*")
INTERPRETER_TARGET = re.compile(r"/usr(/local)?/bin/python3(\.[0-9]+)?")


class MemberError(Exception):
    """A member that may not be unpacked (one line)."""


def check_name(name: str) -> None:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise MemberError(f"its archive holds {name!r}: not a plain relative name (absolute, '.', '..' or '//')")


def check_link_target(name: str, target: str) -> None:
    """A relative target stays inside the tree; an absolute one only for the venv's interpreter links."""
    if target.startswith("/"):
        if INTERPRETER_LINK.fullmatch(name) and INTERPRETER_TARGET.fullmatch(target):
            return
        raise MemberError(f"its archive holds a symlink {name} -> {target}: an absolute target")
    parts = target.split("/")
    ups = len(parts) - len(list(_drop_leading(parts, "..")))
    rest = parts[ups:]
    # `..` only leading: every other component is a name inside the tree, resolved through links that are
    # themselves checked, so no walk can climb out through a link
    if not target or any(p in ("", ".", "..") for p in rest) or ups > name.count("/"):
        raise MemberError(f"its archive holds a symlink {name} -> {target}: a target outside the tree")


def _drop_leading(parts: list[str], value: str) -> list[str]:
    i = 0
    while i < len(parts) and parts[i] == value:
        i += 1
    return parts[i:]


def check_members(members: list[tarfile.TarInfo], files: set[str], links: dict[str, str]) -> None:
    """Every member before any is written: its name, its type, that the manifest lists it as that type (and
    a symlink with that target), and that no member lies below a symlink or a file of the archive."""
    seen: dict[str, str] = {}
    for m in members:
        check_name(m.name)
        if m.name in seen:
            raise MemberError(f"its archive holds {m.name} twice")
        if m.isdir():
            kind = "dir"
        elif m.issym():
            kind = "link"
            if links.get(m.name) != m.linkname:
                raise MemberError(f"its archive holds a symlink {m.name} -> {m.linkname} the manifest does not list")
            check_link_target(m.name, m.linkname)
        elif m.isreg() and not m.issparse() and m.type != tarfile.CONTTYPE:
            kind = "file"
            if m.name not in files:
                raise MemberError(f"its archive holds {m.name}, which the manifest does not list")
        else:
            what = "a hard link" if m.islnk() else "a device or FIFO" if m.isdev() else f"type {m.type!r}"
            raise MemberError(f"its archive holds {m.name}, {what}: only files, directories and symlinks")
        seen[m.name] = kind
    for name in seen:
        parent = posixpath.dirname(name)
        while parent:
            if seen.get(parent, "dir") != "dir":
                raise MemberError(f"its archive holds {name} below {parent}, a {seen[parent]}")
            parent = posixpath.dirname(parent)


def unpack(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    """Lay the checked members down in `dest`, a fresh empty directory, in archive order."""
    for m in members:
        path = dest / m.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if m.isdir():
            path.mkdir(mode=0o755, exist_ok=True)
        elif m.issym():
            os.symlink(m.linkname, path)
        else:
            _write(tar, m, path)


def _write(tar: tarfile.TarFile, m: tarfile.TarInfo, path: Path) -> None:
    source = tar.extractfile(m)
    if source is None:
        raise MemberError(f"its archive's {m.name} cannot be read")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        while block := source.read(CHUNK):
            out.write(block)
    os.chmod(path, m.mode & 0o755)
    os.utime(path, (m.mtime, m.mtime))  # a .pyc names its source's mtime
