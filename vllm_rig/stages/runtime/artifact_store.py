"""Where runtime artifacts live between hosts: a store on the control machine's side.

An artifact is two files named by the build fingerprint (vllm_rig/host/runtime_artifact.py makes and checks
them): <fp>.tar.gz and its manifest <fp>.json. A store keeps whole artifacts only: the archive is put
first, the manifest last, so a manifest means the archive beside it was whole when it was put (the host
verifies every byte anyway before it uses one).

`LocalStore` is a directory on the control machine (the default, `runtime-artifacts/` in the repository).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

from vllm_rig.host import runtime_artifact

REPO = Path(__file__).resolve().parents[3]


class StoreError(Exception):
    """Why the store could not do what was asked (one line, no credentials)."""


class Store(Protocol):
    def describe(self) -> str:
        """For log lines; never shows credentials."""
        ...

    def manifest(self, fingerprint: str) -> bytes | None:
        """The manifest's bytes; None when the store has no whole artifact of this fingerprint."""
        ...

    def archive(self, fingerprint: str) -> Path | None:
        """A file on the control machine holding the archive; None when absent."""
        ...

    def put(self, fingerprint: str, archive: Path, manifest: Path) -> None:
        """Store an artifact: the archive first, the manifest last. StoreError says why not."""
        ...

    def prune(self, keep: int) -> list[str]:
        """Keep the newest `keep` artifacts; the fingerprints removed."""
        ...

    def scratch(self) -> Path:
        """A directory on the control machine for an artifact on its way into the store (for a directory
        store, the store itself: moving a several-GB archive in is a rename, not a copy)."""
        ...


class LocalStore:
    """A directory on the control machine."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> str:
        return str(self.path)

    def manifest(self, fingerprint: str) -> bytes | None:
        path = self.path / runtime_artifact.manifest_name(fingerprint)
        return path.read_bytes() if path.is_file() else None

    def archive(self, fingerprint: str) -> Path | None:
        path = self.path / runtime_artifact.archive_name(fingerprint)
        return path if path.is_file() else None

    def put(self, fingerprint: str, archive: Path, manifest: Path) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for source, name in (
                (archive, runtime_artifact.archive_name(fingerprint)),
                (manifest, runtime_artifact.manifest_name(fingerprint)),
            ):
                _place(source, self.path / name)
        except OSError as err:
            raise StoreError(f"could not write to the artifact store {self.path}: {err.strerror or err}") from None

    def prune(self, keep: int) -> list[str]:
        return runtime_artifact.prune(self.path, keep) if self.path.is_dir() else []

    def scratch(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path


def _place(source: Path, target: Path) -> None:
    """Move (or copy, across file systems) `source` to `target` so that `target` appears whole at once."""
    try:
        os.replace(source, target)
        return
    except OSError:
        pass  # another file system
    part = target.with_name(target.name + ".part")
    shutil.copyfile(source, part)
    os.replace(part, target)


def local_dir(setting: str) -> Path:
    """A directory setting on the control machine; relative to the repository when not absolute."""
    path = Path(setting).expanduser()
    return path if path.is_absolute() else REPO / path


def open_store(setting: str) -> Store:
    """The store `runtime_artifact_store` names."""
    return LocalStore(local_dir(setting))
