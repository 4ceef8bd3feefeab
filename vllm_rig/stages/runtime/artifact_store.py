"""Where runtime artifacts live between hosts: a store on the control machine's side.

An artifact is two files named by the build fingerprint (vllm_rig/host/runtime_artifact.py makes and checks
them): <fp>.tar.gz and its manifest <fp>.json. A store keeps whole artifacts only: the archive is put
first, the manifest last, so a manifest means the archive beside it was whole when it was put (the host
verifies every byte anyway before it uses one).

`LocalStore` is a directory on the control machine (the default, `runtime-artifacts/` in the repository);
`HttpStore` (http_store.py) a web server with uploads that several control machines share.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_rig.core.secrets import Secret
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime.http_store import HttpStore
from vllm_rig.stages.runtime.store import Store, StoreError

if TYPE_CHECKING:
    from vllm_rig.settings import Settings

REPO = Path(__file__).resolve().parents[3]


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


@dataclass(frozen=True)
class StoreSetting:
    """runtime_artifact_store and what an HTTP store needs beside it. An operation argument (pyinfra records
    those with str()), so it prints as the location only; the password stays a Secret."""

    location: str
    auth: Secret = field(default_factory=lambda: Secret(None))
    ca: str | None = None
    key: str = "runtime-artifact.key"  # runtime_artifact_key: signs what is stored, verifies what is offered

    @classmethod
    def of(cls, s: Settings) -> StoreSetting:
        auth = Secret(s.runtime_artifact_store_auth)
        return cls(s.runtime_artifact_store, auth, s.runtime_artifact_store_ca, s.runtime_artifact_key)

    def __str__(self) -> str:
        return self.location


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def open_store(setting: str | StoreSetting) -> Store:
    """The store `runtime_artifact_store` names: an http(s) URL is a shared web store, anything else a
    directory on the control machine."""
    chosen = StoreSetting(setting) if isinstance(setting, str) else setting
    if not is_url(chosen.location):
        return LocalStore(local_dir(chosen.location))
    ca = str(local_dir(chosen.ca)) if chosen.ca else None
    return HttpStore(chosen.location, auth=chosen.auth.reveal(), ca=ca)
