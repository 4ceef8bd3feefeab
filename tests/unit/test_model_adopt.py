"""A box fetched with the layout before huggingface_hub's cache (DIR -> DIR.rev-<commit12>/, plain files) moves
into the cache without downloading its files again: vllm_rig/host/model_fetch.py hard-links each into blobs/
under the name the library gives it (the LFS sha256, the git blob sha1), hashes it, and switches DIR.

A real old-layout tree on disk; the endpoint's listing and the library's download are replaced (no network):
the download records what it is asked for, so "nothing downloaded for adopted files" is what it saw."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from vllm_rig.host import model_fetch as mf

REPO = "owner/model"
COMMIT = "c" * 40
SHARD = b"weights " * 4096
CONFIG = b'{"architectures": []}\n'
NEW = b"only in the new listing\n"


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def remote(path: str, data: bytes, lfs: bool) -> mf.RemoteFile:
    return mf.RemoteFile(path, len(data), hashlib.sha256(data).hexdigest() if lfs else None, git_oid(data))


PLAN = mf.Plan(
    REPO,
    "main",
    COMMIT,
    "http://mirror.invalid",
    (
        remote("config.json", CONFIG, lfs=False),
        remote("model.safetensors", SHARD, lfs=True),
        remote("new.json", NEW, lfs=False),
    ),
)


def old_layout(models: Path) -> Path:
    """DIR -> DIR.rev-<commit12>/ with the old marker, as model_fetch wrote it before the cache."""
    rev = models / f"model.rev-{COMMIT[:12]}"
    rev.mkdir(parents=True)
    (rev / "config.json").write_bytes(CONFIG)
    (rev / "model.safetensors").write_bytes(SHARD)
    (rev / mf.MARKER).write_text(json.dumps(mf.make_marker(PLAN)))
    (models / "model").symlink_to(rev.name)
    return models / "model"


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The listing is PLAN; the download puts what it is asked for into the cache as the library would."""
    calls: list[list[str]] = []
    contents = {"config.json": CONFIG, "model.safetensors": SHARD, "new.json": NEW}

    def download(plan: mf.Plan, cache: Path, paths: list[str], workers: int, status: mf.Status) -> str:
        calls.append(sorted(paths))
        source = cache.parent / "downloaded"
        snapshot = cache / f"models--{plan.repo.replace('/', '--')}" / "snapshots" / plan.commit
        for f in plan.files:
            if f.path in paths:
                source.mkdir(exist_ok=True)
                (source / f.path).write_bytes(contents[f.path])
                assert mf.adopt(snapshot, f, source / f.path)
        return ""

    monkeypatch.setattr(mf, "resolve", lambda *_a, **_k: PLAN)
    monkeypatch.setattr(mf, "download", download)
    return calls


def fetch(dest: Path) -> int:
    args = mf.parse_args(["fetch", "--repo", REPO, "--dest", str(dest), "--status-file", str(dest.parent / "s.json")])
    args.endpoint = PLAN.endpoint
    return mf.fetch(args)


def test_an_old_layout_box_is_adopted_into_the_cache_downloading_only_what_it_lacks(
    tmp_path: Path, asked: list[list[str]]
) -> None:
    dest = old_layout(tmp_path / "models")
    inode = (dest / "model.safetensors").stat().st_ino
    # The old marker matches, but the box is not in the cache yet: the check sends the deploy to fetch.
    assert mf.main(["check", "--repo", REPO, "--revision", "main", "--dest", str(dest)]) == mf.EXIT_INCOMPLETE
    assert fetch(dest) == mf.EXIT_OK
    assert asked == [["new.json"]]  # the adopted files were not downloaded
    assert os.readlink(dest) == f"hf-cache/models--owner--model/snapshots/{COMMIT}"
    blob = tmp_path / "models" / "hf-cache" / "models--owner--model" / "blobs" / hashlib.sha256(SHARD).hexdigest()
    assert blob.stat().st_ino == inode  # a hard link of the old file, not a copy
    assert (dest / "config.json").resolve().name == git_oid(CONFIG)  # a plain git file: its blob sha1
    assert not list((tmp_path / "models").glob("model.rev-*"))  # the old snapshot goes after the switch
    assert mf.main(["check", "--repo", REPO, "--revision", "main", "--dest", str(dest)]) == mf.EXIT_OK
    assert all(v.ok for v in mf.verify_all(dest, PLAN.files, lambda: None).values())  # every adopted file hashed


def test_the_library_reads_the_adopted_files_as_its_own_cache(tmp_path: Path, asked: list[list[str]]) -> None:
    from huggingface_hub import scan_cache_dir

    dest = old_layout(tmp_path / "models")
    assert fetch(dest) == mf.EXIT_OK
    found = scan_cache_dir(tmp_path / "models" / "hf-cache")
    assert not found.warnings
    (repo,) = found.repos
    (revision,) = repo.revisions
    assert repo.repo_id == REPO and revision.commit_hash == COMMIT
    assert {f.file_name for f in revision.files} >= {"config.json", "model.safetensors", "new.json"}


def test_a_file_of_the_wrong_size_is_downloaded_not_adopted(tmp_path: Path, asked: list[list[str]]) -> None:
    dest = old_layout(tmp_path / "models")
    (dest / "model.safetensors").write_bytes(SHARD[:-1])
    assert fetch(dest) == mf.EXIT_OK
    assert asked == [["model.safetensors", "new.json"]]
    assert (dest / "model.safetensors").read_bytes() == SHARD


@pytest.mark.parametrize(
    ("oid", "lfs_oid"), [("../../../etc/x" + "0" * 26, None), ("b" * 40, "../" * 20 + "x" * 4), ("B" * 40, None)]
)
def test_a_listed_hash_that_is_not_hex_is_refused_before_it_names_a_blob(
    monkeypatch: pytest.MonkeyPatch, oid: str, lfs_oid: str | None
) -> None:
    """The listing's hashes name the cache's blobs: a mirror's name that climbs out never reaches the disk."""
    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile

    lfs = {"oid": lfs_oid, "size": 1, "pointerSize": 0} if lfs_oid else None

    class Api:
        def __init__(self, **_: object) -> None:
            pass

        def model_info(self, repo: str, revision: str) -> object:
            return type("Info", (), {"sha": COMMIT})()

        def list_repo_tree(self, repo: str, revision: str, recursive: bool) -> list[RepoFile]:
            return [RepoFile(path="config.json", size=1, oid=oid, lfs=lfs)]

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    with pytest.raises(mf.FetchError) as err:
        mf.resolve(REPO, "main", "http://mirror.invalid")
    assert err.value.code == mf.EXIT_UNREACHABLE and "not hex" in str(err.value)
