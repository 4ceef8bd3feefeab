"""What every runtime artifact store does (artifact_store.py's directory, http_store.py's web server), apart from
both so that neither imports the other."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


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
