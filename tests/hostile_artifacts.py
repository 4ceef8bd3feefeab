"""Hostile runtime artifacts (issue 23, A-D and their neighbours), as whoever can write to the artifact store
can make them: the archive and a manifest that vouches for exactly it. Used by tests/unit/test_artifact_hostile.py
(this machine's Python) and tests/sandbox/test_artifact_hostile.py (the sandbox host's Python, as root).

Each case lays out a box (a runtime with its source checkout, and /etc-like files outside it) under a root
directory and a store for it; `root` in a case is the root as the installing host sees it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

from vllm_rig.host import runtime_artifact as ra

FP = "cd" * 32
RUNTIME = f"opt/runtimes/{FP[:16]}"
Add = Callable[[tarfile.TarFile, dict, dict, str], None]


def snapshot(root: Path, skip: str = "store") -> dict[str, object]:
    """Every path under root but the store: a symlink's target, a file's bytes and mode, anything else's mode."""
    seen: dict[str, object] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            if rel.split("/")[0] == skip:
                continue
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_file():
                seen[rel] = ("file", path.read_bytes(), path.stat().st_mode)
            else:
                seen[rel] = ("other", path.lstat().st_mode)
    return seen


def add_file(tar: tarfile.TarFile, files: dict, name: str, data: bytes, mode: int = 0o644, listed: bool = True) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))
    if listed:
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "mode": mode}


def add_link(tar: tarfile.TarFile, links: dict, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tar.addfile(info)
    if kind == tarfile.SYMTYPE:
        links[name] = target


def add_special(tar: tarfile.TarFile, files: dict, name: str, kind: bytes) -> None:
    """A device node or FIFO, listed in the manifest as the store can list anything."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.devmajor, info.devminor = kind, 0o666, 1, 1
    tar.addfile(info)
    files[name] = {"sha256": hashlib.sha256(b"").hexdigest(), "mode": 0o666}


def make_box(local: Path) -> Path:
    """The host before the install: the runtime (source checkout, no venv) and files outside it."""
    runtime = local / RUNTIME
    (runtime / "src" / "flashqla" / "flash_qla").mkdir(parents=True)
    (runtime / "src" / "flashqla" / "flash_qla" / "__init__.py").write_text("# checkout\n")
    (runtime / "build-spec.json").write_text("{}")
    (local / "etc").mkdir()
    (local / "etc" / "passwd").write_text("root:x:0:0\n")
    (local / "etc" / "link").symlink_to("passwd")
    return runtime


def make_store(local: Path, root: str, add: Add) -> Path:
    """<local>/store: the archive `add` fills and the manifest that matches it."""
    store = local / "store"
    store.mkdir()
    archive = store / ra.archive_name(FP)
    files: dict = {}
    links: dict = {}
    with tarfile.open(archive, "w:gz") as tar:
        add(tar, files, links, root)
    manifest = {
        "fingerprint": FP,
        "runtime": f"{root}/{RUNTIME}",
        "archive": archive.name,
        "archive_sha256": ra.file_sha256(archive),
        "archive_bytes": archive.stat().st_size,
        "files": files,
        "links": links,
    }
    (store / ra.manifest_name(FP)).write_text(json.dumps(manifest))
    return store


def _a_symlink_named_outside(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "../../../etc/link", "/tmp/elsewhere")


def _an_absolute_name(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_file(tar, files, f"{root}/etc/passwd", b"owned")


def _b_hard_link_then_file(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/pw", f"{root}/etc/passwd", kind=tarfile.LNKTYPE)
    add_file(tar, files, "venv/pw", b"root::0:0\n")


def _c_device(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_file(tar, files, "venv/ok", b"fine")
    add_special(tar, files, "venv/mem", tarfile.CHRTYPE)


def _c_fifo(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_special(tar, files, "venv/pipe", tarfile.FIFOTYPE)


def _d_refused_at_verify(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    """src/flashqla is the service's PYTHONPATH: a sitecustomize.py left there would run in every start."""
    add_file(tar, files, "src/flashqla/sitecustomize.py", b"import os; os.system('id')\n")
    add_file(tar, files, "venv/lib.so", b"kernels")
    files["venv/lib.so"]["sha256"] = "0" * 64  # refused only after everything was laid down


def _d_refused_at_last_member(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_file(tar, files, "src/flashqla/sitecustomize.py", b"import os\n")
    add_file(tar, files, "venv/extra", b"x", listed=False)


def _link_escapes(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/escape", "../../../../etc/passwd")


def _link_escapes_after_a_name(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/escape", "lib/../../../../..")


def _interpreter_link_elsewhere(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/bin/python", f"{root}/etc/passwd")


def _absolute_link_not_the_interpreter(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/other", "/usr/bin/python3")


def _file_through_a_link(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/etc", "../../../../../etc")
    add_file(tar, files, "venv/etc/passwd", b"owned")


def _file_through_an_inside_link(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/lib64", "lib")
    add_file(tar, files, "venv/lib64/x.py", b"x")


def _link_then_file_of_its_name(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_link(tar, links, "venv/bin/python", "/usr/bin/python3")
    add_file(tar, files, "venv/bin/python", b"#!/bin/sh\n")


def _manifest_names_outside(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    add_file(tar, files, "venv/ok", b"fine")
    files["../../../etc/passwd"] = {"sha256": "0" * 64, "mode": 0o644}


# name -> (what the archive holds, a regex of the one line that refuses it)
REFUSED: dict[str, tuple[Add, str]] = {
    "A symlink named outside": (_a_symlink_named_outside, r"\.\./\.\./\.\./etc/link.*not a plain relative name"),
    "absolute name": (_an_absolute_name, "absolute"),
    "B hard link then file": (_b_hard_link_then_file, "venv/pw, a hard link"),
    "C device node": (_c_device, "venv/mem, a device or FIFO"),
    "C fifo": (_c_fifo, "venv/pipe, a device or FIFO"),
    "D refused at verify": (_d_refused_at_verify, "venv/lib.so has sha256"),
    "D refused at the last member": (_d_refused_at_last_member, "venv/extra, which the manifest does not list"),
    "link escapes": (_link_escapes, "outside the tree"),
    "link escapes after a name": (_link_escapes_after_a_name, "outside the tree"),
    "interpreter link elsewhere": (_interpreter_link_elsewhere, "an absolute target"),
    "absolute link": (_absolute_link_not_the_interpreter, "an absolute target"),
    "file through a link": (_file_through_a_link, "symlink venv/etc -> .* outside the tree"),
    "file through an inside link": (_file_through_an_inside_link, "venv/lib64/x.py below venv/lib64, a link"),
    "link then file": (_link_then_file_of_its_name, "venv/bin/python twice"),
    "manifest names outside": (_manifest_names_outside, "its manifest holds '../../../etc/passwd'"),
}


def good(tar: tarfile.TarFile, files: dict, links: dict, root: str) -> None:
    """What a real build packs: interpreter links, links inside, a file laid over the checkout; a setuid bit."""
    add_file(tar, files, "venv/bin/tool", b"#!/bin/sh\n", mode=0o4777)
    add_link(tar, links, "venv/bin/python", "/usr/bin/python3.12")
    add_link(tar, links, "venv/bin/python3", "python")
    add_link(tar, links, "venv/lib64", "lib")
    add_link(tar, links, "venv/lib/up", "../../src/flashqla")
    add_file(tar, files, "src/flashqla/flash_qla/ops.py", b"adapted")
