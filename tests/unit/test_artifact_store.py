"""vllm_rig/stages/runtime/artifact_store.py's directory store on a real directory: a manifest means a whole
artifact, put moves files in whole (rename within the store, copy across file systems), prune keeps the newest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllm_rig.stages.runtime.artifact_store import LocalStore, local_dir, open_store
from vllm_rig.stages.runtime.store import StoreError


def artifact(where: Path, fp: str, body: bytes = b"archive") -> tuple[Path, Path]:
    where.mkdir(parents=True, exist_ok=True)
    archive, manifest = where / f"{fp}.tar.gz", where / f"{fp}.json"
    archive.write_bytes(body)
    manifest.write_text(json.dumps({"fingerprint": fp}) + "\n")
    return archive, manifest


def test_put_then_read_back(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    assert store.manifest("a" * 64) is None and store.archive("a" * 64) is None
    incoming = Path(os.path.join(store.scratch(), ".incoming-x"))
    store.put("a" * 64, *artifact(incoming, "a" * 64, b"x" * 10))
    assert json.loads(store.manifest("a" * 64) or b"null") == {"fingerprint": "a" * 64}
    archive = store.archive("a" * 64)
    assert archive is not None and archive.read_bytes() == b"x" * 10
    assert not (incoming / f"{'a' * 64}.tar.gz").exists()  # moved, not copied


def test_put_from_elsewhere_copies(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    source = artifact(tmp_path / "elsewhere", "b" * 64)
    store.put("b" * 64, *source)
    assert store.archive("b" * 64) is not None
    assert not list((tmp_path / "store").glob("*.part"))


def test_an_archive_without_manifest_is_not_an_artifact(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    (tmp_path / f"{'c' * 64}.tar.gz").write_bytes(b"half")
    assert store.manifest("c" * 64) is None


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    for age, fp in enumerate(("1" * 64, "2" * 64, "3" * 64)):
        store.put(fp, *artifact(tmp_path / f"in{age}", fp))
        stamp = 1_700_000_000 + age * 60
        os.utime(tmp_path / "store" / f"{fp}.json", (stamp, stamp))
    assert store.prune(2) == ["1" * 64]
    assert store.manifest("1" * 64) is None and store.archive("1" * 64) is None
    assert store.manifest("3" * 64) is not None


def test_unwritable_store_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=r"could not write to the artifact store .*file/store"):
        LocalStore(blocker / "store").put("d" * 64, *artifact(tmp_path / "in", "d" * 64))


def test_relative_setting_is_under_the_repository() -> None:
    assert local_dir("runtime-artifacts") == Path(__file__).resolve().parents[2] / "runtime-artifacts"
    assert isinstance(open_store("/srv/artifacts"), LocalStore)
