"""vllm_rig/host/model_fetch.py's pieces in process, no endpoint: the client's environment, what the download asks
the library for, the refusals before any byte is fetched, the git blob check. The whole program against the HF
mirror stand-in is tests/sandbox/test_model_fetch.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_rig.host import model_fetch as mf

REPO = "nerkyor/Qwen3.6-27B-DSV4Pro-Thinking-Distill-FP8"


def test_environment_for_the_client() -> None:
    base = {"PATH": "/usr/bin", "HF_HUB_OFFLINE": "1", "no_proxy": "example.org", "HF_TOKEN": ""}
    env = mf.hub_env(base, "http://127.0.0.1:1/", disable_xet=True)
    assert env["HF_ENDPOINT"] == "http://127.0.0.1:1" and env["HF_HUB_DISABLE_XET"] == "1"
    assert env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1" and "HF_TOKEN" not in env
    assert env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1" and "HF_HUB_OFFLINE" not in env
    assert env["NO_PROXY"] == env["no_proxy"] == "example.org,127.0.0.1,localhost"
    with_token = mf.hub_env({"HF_TOKEN": "t0k", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}, None, disable_xet=False)
    assert with_token["HF_TOKEN"] == "t0k" and "HF_HUB_DISABLE_IMPLICIT_TOKEN" not in with_token
    assert "HF_HUB_DISABLE_XET" not in with_token
    assert mf.endpoint_host("https://user:secret@mirror.example:8443/sub/") == "https://mirror.example:8443"


def test_download_pins_the_commit_names_files_not_globs_and_sends_no_token_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: calls.append({"repo": repo, **kw}))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    plan = mf.Plan(REPO, "main", "a" * 40, "http://x", (mf.RemoteFile("odd[1]*.json", 1, None, "b" * 40),))
    status = mf.Status(tmp_path / "status.json", REPO, "main")
    assert mf.download(plan, tmp_path, ["config.json", "odd[1]*.json"], 8, status) == ""
    (call,) = calls
    assert call["revision"] == "a" * 40 and call["endpoint"] == "http://x" and call["cache_dir"] == tmp_path
    assert call["allow_patterns"] == ["config.json", "odd[[]1][*].json"] and call["token"] is False


def test_a_big_file_listed_without_an_lfs_hash_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library hashes a plain git file in one read: a mirror listing a shard as one would fill the memory."""
    import huggingface_hub
    from huggingface_hub.hf_api import RepoFile

    class Api:
        def __init__(self, **_: Any) -> None:
            pass

        def model_info(self, repo: str, revision: str) -> Any:
            return SimpleNamespace(sha="a" * 40)

        def list_repo_tree(self, repo: str, revision: str, recursive: bool) -> list[RepoFile]:
            return [RepoFile(path="model.safetensors", size=5 << 30, oid="b" * 40)]

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    with pytest.raises(mf.FetchError) as err:
        mf.resolve(REPO, "main", "http://x")
    assert err.value.code == 2 and "'model.safetensors'" in str(err.value) and "without an LFS sha256" in str(err)


def test_disk_check_refuses_before_downloading(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plan = mf.Plan(REPO, "main", "a" * 40, "http://x", (mf.RemoteFile("big", 50 << 30, "c" * 64, "b" * 40),))
    places = mf.Places(tmp_path / "model")
    monkeypatch.setattr(mf.shutil, "disk_usage", lambda _: SimpleNamespace(total=100 << 30, free=10 << 30))
    with pytest.raises(mf.FetchError) as err:
        mf.check_space(places, plan)
    assert err.value.code == 5 and "free" in str(err.value)


def test_git_blob_sha1_for_files_without_lfs(tmp_path: Path) -> None:
    data = b"plain git file\n"
    (tmp_path / "f").write_bytes(data)
    oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert mf.verify_file(tmp_path, mf.RemoteFile("f", len(data), None, oid)).ok
    assert mf.verify_file(tmp_path, mf.RemoteFile("f", len(data), None, "0" * 40)).problem == "hash"
    assert mf.verify_file(tmp_path, mf.RemoteFile("f", len(data) + 1, None, oid)).problem == "size"
    assert mf.verify_file(tmp_path, mf.RemoteFile("g", 1, None, oid)).problem == "missing"
