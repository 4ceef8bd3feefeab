"""vllm_rig/host/runtime_artifact.py on a real directory tree: pack, install and verify, and each refusal
(missing, partial, corrupt, another path, a file changed in the archive) with its one reason."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from vllm_rig.host import runtime_artifact as ra

FP = "ab" * 32


def _runtime(root: Path) -> Path:
    rt = root / "opt" / "runtimes" / FP[:16]
    (rt / "venv" / "bin").mkdir(parents=True)
    (rt / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (rt / "venv" / "lib.so").write_bytes(os.urandom(4096))
    (rt / "venv" / "bin" / "tool").write_text("#!/bin/sh\n")
    (rt / "venv" / "bin" / "tool").chmod(0o755)
    (rt / "src" / "vllm" / ".git").mkdir(parents=True)
    (rt / "src" / "vllm" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (rt / "src" / "vllm" / "_C.so").write_bytes(b"kernels")
    (rt / ".build").mkdir()
    (rt / ".build" / "compile.done").write_text(FP)
    (rt / "runtime.json").write_text("{}")
    (rt / "fingerprint").write_text(FP)
    return rt


def _moved(rt: Path, tmp: Path) -> Path:
    """The same runtime path on a 'second host': the tree emptied, as a fresh box has it."""
    import shutil

    shutil.rmtree(rt)
    rt.mkdir(parents=True)
    return rt


def test_pack_then_install_restores_every_built_file_and_only_those(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    store = tmp_path / "store"
    manifest = ra.pack(rt, FP, store)
    assert set(manifest["files"]) == {"venv/lib.so", "venv/bin/tool", "src/vllm/_C.so"}
    assert manifest["links"] == {"venv/bin/python": "/usr/bin/python3"}
    original = (rt / "venv" / "lib.so").read_bytes()
    _moved(rt, tmp_path)
    ra.install(rt, FP, store)
    assert (rt / "venv" / "lib.so").read_bytes() == original
    assert os.readlink(rt / "venv" / "bin" / "python") == "/usr/bin/python3"
    assert (rt / "venv" / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert not (rt / "runtime.json").exists() and not (rt / ".build").exists()


def test_missing_partial_and_corrupt_artifacts_are_refused_with_the_reason(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    store = tmp_path / "store"
    with pytest.raises(ra.ArtifactError, match="no artifact for this fingerprint"):
        ra.install(rt, FP, store)
    ra.pack(rt, FP, store)
    archive = store / ra.archive_name(FP)
    whole = archive.read_bytes()
    archive.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ra.ArtifactError, match="partial"):
        ra.install(rt, FP, store)
    flipped = bytearray(whole)
    flipped[len(flipped) // 2] ^= 0xFF
    archive.write_bytes(bytes(flipped))
    with pytest.raises(ra.ArtifactError, match="corrupt"):
        ra.install(rt, FP, store)
    archive.unlink()
    with pytest.raises(ra.ArtifactError, match="missing: partial"):
        ra.install(rt, FP, store)


def test_another_path_or_a_changed_file_is_refused(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    store = tmp_path / "store"
    ra.pack(rt, FP, store)
    with pytest.raises(ra.ArtifactError, match="built at"):
        ra.install(tmp_path / "elsewhere", FP, store)
    # an archive rebuilt with one file changed and its archive sum updated: the per-file sums still catch it
    path = store / ra.manifest_name(FP)
    manifest = json.loads(path.read_text())
    (rt / "src" / "vllm" / "_C.so").write_bytes(b"other kernels")
    archive = store / ra.archive_name(FP)
    with tarfile.open(archive, "w:gz") as tar:
        for rel in [*manifest["files"], *manifest["links"]]:
            tar.add(rt / rel, arcname=rel, recursive=False)
    manifest.update(archive_sha256=ra.file_sha256(archive), archive_bytes=archive.stat().st_size)
    path.write_text(json.dumps(manifest))
    with pytest.raises(ra.ArtifactError, match="src/vllm/_C.so has sha256"):
        ra.install(rt, FP, store)


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    store = tmp_path / "store"
    fps = [c * 64 for c in "123"]
    for age, fp in enumerate(fps):
        ra.pack(rt, fp, store)
        os.utime(store / ra.manifest_name(fp), (1000 + age, 1000 + age))
    assert ra.prune(store, 2) == [fps[0]]
    assert sorted(p.name for p in store.iterdir()) == sorted(
        n for fp in fps[1:] for n in (ra.archive_name(fp), ra.manifest_name(fp))
    )
