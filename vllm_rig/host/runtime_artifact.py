"""Runtime artifacts: a built runtime packed once, installed on every host of the same build fingerprint.

An artifact is two files named by the fingerprint: <fp>.tar.gz (the runtime directory as the build left it:
the venv with the compiled fork, FlashQLA's adapted tree, the patched FlashInfer headers) and <fp>.json, its
manifest (the runtime path it was built at, the archive's sha256, every file's sha256 and mode, every
symlink). Git metadata is left out: the deploy checks the sources out on every host anyway, and the files an
artifact lays over those checkouts are verified like the rest. What marks a runtime complete (runtime.json)
and the build's own bookkeeping are never packed: the installing host runs the build's checks itself.

`install` refuses, with one reason, an artifact that is missing, partial (no archive, or a short one),
corrupt (a sha256 that differs), of another fingerprint or built at another path (a venv holds absolute
paths), or whose members would write anywhere but inside the runtime. Standard library only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from . import tar_members

# Top-level entries of a runtime directory that are not part of what the build made.
NOT_PACKED = {".build", "build-spec.json", "runtime.json", "fingerprint", "rolled-back"}
CHUNK = 1 << 20


class ArtifactError(Exception):
    """Why an artifact cannot be used (one line)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def archive_name(fingerprint: str) -> str:
    return f"{fingerprint}.tar.gz"


def manifest_name(fingerprint: str) -> str:
    return f"{fingerprint}.json"


def _members(runtime: Path) -> list[Path]:
    """Every file and symlink to pack, relative to the runtime, in a stable order."""
    found = []
    for top, dirs, files in os.walk(runtime):
        here = Path(top)
        rel_top = here.relative_to(runtime)
        dirs[:] = sorted(
            d
            for d in dirs
            if d != ".git" and not (rel_top == Path(".") and d in NOT_PACKED) and not (here / d).is_symlink()
        )
        for d in sorted(os.listdir(here)):
            if (here / d).is_symlink() and (here / d).is_dir():
                found.append((here / d).relative_to(runtime))
        for name in sorted(files):
            if rel_top == Path(".") and name in NOT_PACKED:
                continue
            if rel_top.parts[-1:] == (".git",) or name == ".git":
                continue  # a submodule's .git file
            found.append((here / name).relative_to(runtime))
    return found


def pack(runtime: Path, fingerprint: str, out_dir: Path) -> dict[str, Any]:
    """Write <out_dir>/<fp>.tar.gz, then its manifest <fp>.json (the manifest last: its presence means the
    archive beside it is whole). Returns the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / archive_name(fingerprint)
    partial = archive.with_name(archive.name + ".part")
    files: dict[str, dict[str, Any]] = {}
    links: dict[str, str] = {}
    with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
        for rel in _members(runtime):
            path = runtime / rel
            tar.add(path, arcname=str(rel), recursive=False)
            if path.is_symlink():
                links[str(rel)] = os.readlink(path)
            else:
                files[str(rel)] = {"sha256": file_sha256(path), "mode": path.stat().st_mode & 0o7777}
    manifest = {
        "fingerprint": fingerprint,
        "runtime": str(runtime),
        "archive": archive.name,
        "archive_sha256": file_sha256(partial),
        "archive_bytes": partial.stat().st_size,
        "files": files,
        "links": links,
        "made_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    os.replace(partial, archive)
    tmp = out_dir / (manifest_name(fingerprint) + ".part")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out_dir / manifest_name(fingerprint))
    return manifest


def read_manifest(store: Path, fingerprint: str) -> dict[str, Any]:
    path = store / manifest_name(fingerprint)
    if not path.is_file():
        raise ArtifactError(f"no artifact for this fingerprint ({path} is missing)")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as err:
        raise ArtifactError(f"its manifest {path} is not JSON ({err}): corrupt") from None
    if manifest.get("fingerprint") != fingerprint:
        raise ArtifactError(f"its manifest is for fingerprint {str(manifest.get('fingerprint'))[:16]}, not this one")
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("links"), dict):
        raise ArtifactError(f"its manifest {path} lists no files and links: corrupt")
    for name in [*manifest["files"], *manifest["links"]]:
        try:
            tar_members.check_name(name)
        except tar_members.MemberError as err:
            raise ArtifactError(f"{str(err).replace('its archive', 'its manifest')}: refused") from None
    return manifest


def check_archive(store: Path, manifest: dict[str, Any]) -> Path:
    archive = store / str(manifest.get("archive"))
    if not archive.is_file():
        raise ArtifactError(f"its archive {archive} is missing: partial")
    size, want = archive.stat().st_size, manifest.get("archive_bytes")
    if size != want:
        raise ArtifactError(f"its archive is {size} bytes, the manifest says {want}: partial")
    got = file_sha256(archive)
    if got != manifest.get("archive_sha256"):
        want = manifest.get("archive_sha256")
        raise ArtifactError(f"its archive's sha256 is {got[:16]}, the manifest says {str(want)[:16]}: corrupt")
    return archive


def verify(runtime: Path, manifest: dict[str, Any]) -> None:
    """Every file has its sha256 and mode, every symlink its target."""
    for rel, want in manifest["files"].items():
        path = runtime / rel
        if not path.is_file() or path.is_symlink():
            raise ArtifactError(f"{rel} is missing after unpacking")
        got = file_sha256(path)
        if got != want["sha256"]:
            raise ArtifactError(f"{rel} has sha256 {got[:16]} after unpacking, the manifest says {want['sha256'][:16]}")
    for rel, target in manifest["links"].items():
        path = runtime / rel
        if not path.is_symlink() or os.readlink(path) != target:
            raise ArtifactError(f"{rel} is not the symlink to {target} the manifest lists")


def install(runtime: Path, fingerprint: str, store: Path) -> dict[str, Any]:
    """Unpack the fingerprint's artifact from `store` into `runtime` and verify every file; ArtifactError
    says why not. Returns the manifest.

    Every member is checked before anything is written (vllm_rig/host/tar_members.py); the archive is laid
    down in a fresh directory beside the runtime, verified there, and only then moved into place, so a refused
    artifact leaves the runtime as it was and nothing of its own behind."""
    manifest = read_manifest(store, fingerprint)
    if manifest.get("runtime") != str(runtime):
        built_at = manifest.get("runtime")
        raise ArtifactError(f"it was built at {built_at}, this host builds at {runtime} (a venv holds absolute paths)")
    archive = check_archive(store, manifest)
    staging = Path(tempfile.mkdtemp(prefix=f".{runtime.name}.unpack-", dir=runtime.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            try:
                tar_members.check_members(members, set(manifest["files"]), manifest["links"])
                tar_members.unpack(tar, members, staging)
            except tar_members.MemberError as err:
                raise ArtifactError(f"{err}: refused") from None
        verify(staging, manifest)
        _move_into(staging, runtime)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _move_into(staging: Path, runtime: Path) -> None:
    """The verified tree into the runtime: the venv replaces any earlier one whole; the files laid over the
    source checkouts (src/...) replace theirs one by one, each by a rename."""
    runtime.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):
        dest = runtime / entry.name
        if entry.name == "venv" and dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        _merge(entry, dest)


def _merge(source: Path, dest: Path) -> None:
    if source.is_dir() and not source.is_symlink() and dest.is_dir() and not dest.is_symlink():
        for entry in sorted(source.iterdir()):
            _merge(entry, dest / entry.name)
        return
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)  # a directory where the build left a file or a link: the artifact's wins
    os.replace(source, dest)


def prune(store: Path, keep: int) -> list[str]:
    """Keep the `keep` newest artifacts (by manifest time); remove the others and any leftover partial file.
    Returns the fingerprints removed."""
    manifests = sorted(store.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for path in manifests[keep:]:
        fp = path.name.removesuffix(".json")
        (store / archive_name(fp)).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        removed.append(fp)
    for leftover in store.glob("*.part"):
        leftover.unlink(missing_ok=True)
    return removed


def remove(store: Path, fingerprint: str) -> None:
    for name in (archive_name(fingerprint), manifest_name(fingerprint)):
        (store / name).unlink(missing_ok=True)


def discard_unpacked(runtime: Path) -> None:
    """After a refused artifact: drop any venv (a move into place cut short may have left half of one; a
    refusal before that leaves the runtime as it was, and the build makes the venv again either way)."""
    shutil.rmtree(runtime / "venv", ignore_errors=True)
