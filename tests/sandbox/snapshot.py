"""A machine's tree kept after a whole deploy and put back for a later module: the scenarios that only add to a
serving box (keys, the chat page, a model switch, the real parser's words) start from the state the first whole
deploy on this slot made, instead of paying about two minutes for the same deploy again.

What the deploy leaves on the control machine for that box goes with the tree (its LAN CA, `lan-ca/NAME-ca.crt`).
A snapshot is named by a digest of everything that decides what the deploy makes (the product, the sandbox and its
fixtures, the suite's kind): a changed file makes a new one, a stale one is never put back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.sandbox import machine, paths

SNAPSHOTS = paths.ROOT / "snapshots"
# What decides the tree a whole deploy leaves (tests/ other than the sandbox does not).
INPUTS = ("deploy.py", "vllm_rig", "tasks", "files", "templates", "group_data", "inventory", "locks", "tests/sandbox")
ENV = ("VLLM_RIG_SANDBOX_RUNTIME_KIND", "VLLM_RIG_SANDBOX_HOST_DATA")


def digest() -> str:
    h = hashlib.sha256()
    for name in ENV:
        h.update(f"{name}={os.environ.get(name, '')}\0".encode())
    for top in INPUTS:
        root = paths.REPO / top
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(paths.REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _place(m: machine.Machine, label: str) -> Path:
    return SNAPSHOTS / f"{m.name}-{label}-{digest()}"


def _control_files(m: machine.Machine) -> list[Path]:
    return [paths.REPO / "lan-ca" / f"{m.name}-ca.crt"]


def _copy_tree(src: Path, dst: Path) -> None:
    if dst.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(dst)], check=True)
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def keep(m: machine.Machine, label: str) -> None:
    """Keep the machine's tree (powered off for the copy, then started again) and its control-side files."""
    place = _place(m, label)
    tmp = place.with_name(place.name + ".new")
    tmp.mkdir(parents=True, exist_ok=True)
    machine.down(m)
    try:
        _copy_tree(m.dir, tmp / "tree")
        for path in _control_files(m):
            if path.exists():
                shutil.copy2(path, tmp / path.name)
    finally:
        machine.start(m)
    for old in SNAPSHOTS.glob(f"{m.name}-{label}-*"):  # this one if there, and those of other code
        if old != tmp:
            subprocess.run(["rm", "-rf", "--one-file-system", str(old)], check=True)
    tmp.rename(place)  # whole or not at all: an interrupted copy is never put back
    machine.wait_ssh(m, timeout=120)


def put_back(m: machine.Machine, label: str) -> bool:
    """The machine as it was when `keep` ran (and its control-side files), booted: False when there is none."""
    place = _place(m, label)
    if not place.exists():
        return False
    machine.down(m)
    _copy_tree(place / "tree", m.dir)
    for path in _control_files(m):  # as they were: one the box had not made yet is not left from another
        if (place / path.name).exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(place / path.name, path)
        else:
            path.unlink(missing_ok=True)
    machine.start(m)
    machine.wait_ssh(m, timeout=120)
    return True
