"""The HF mirror's generated repos and its HTTP answers, as the Hub gives them to huggingface_hub.

The product's client against it (huggingface_hub 2.4.0 in process: downloads, resume, faults, checksums) is
tests/sandbox/test_model_fetch.py; the preflight's stdlib client is tests/sandbox/test_model_preflight.py.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox import paths
from tests.sandbox.fixtures import hf_mirror
from tests.sandbox.fixtures.hf_mirror import generate

REPO, SECOND_REPO = hf_mirror.REPO_IDS
BIG_SHARD = "model-00001-of-00003.safetensors"
SMALL_SHARD = "model-00002-of-00003.safetensors"
MIB = 1 << 20


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[hf_mirror.Running]:
    yield from hf_mirror.serving(tmp_path_factory.mktemp("hf-mirror-state"))


@pytest.fixture
def mirror(served: hf_mirror.Running) -> hf_mirror.Running:
    return served.reset()


def source(repo: str, branch: str = "main") -> Path:
    return hf_mirror.source(branch, repo)


def digests(directory: Path) -> dict[str, str]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def http(
    mirror: hf_mirror.Running, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on error statuses."""
    request = urllib.request.Request(mirror.url + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


# -- the generated repos --------------------------------------------------------------------------


def test_build_is_idempotent_and_deterministic(served: hf_mirror.Running, tmp_path: Path) -> None:
    assert generate.build_repos(paths.WWW / "hf") is False  # already built: nothing to do
    # A fresh build elsewhere gives the same bytes, hence the same commit shas.
    assert generate.build_repos(tmp_path / "hf") is True
    for repo in hf_mirror.REPO_IDS:
        for branch in ("main", "v2"):
            assert digests(tmp_path / "hf" / repo / branch) == digests(source(repo, branch))


def _safetensors_header(file: Path) -> tuple[int, dict[str, Any]]:
    with file.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        return length, json.loads(f.read(length))


@pytest.mark.parametrize("repo", [REPO, SECOND_REPO])
def test_repo_is_laid_out_like_the_fp8_checkpoint(served: hf_mirror.Running, repo: str) -> None:
    top = source(repo)
    config = json.loads((top / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5"
    assert config["text_config"]["max_position_embeddings"] == 262144
    assert config["quantization_config"]["quant_method"] == "fp8"
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    for name in (
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
    ):
        json.loads((top / name).read_text())
    assert "<|im_start|>" in (top / "chat_template.jinja").read_text()

    index = json.loads((top / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [*(f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)), "mtp.safetensors"]
    total = 0
    for name in files:
        length, header = _safetensors_header(top / name)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        ends = sorted(v["data_offsets"] for v in tensors.values())
        assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:], strict=False))
        assert (top / name).stat().st_size == 8 + length + ends[-1][1]
        assert {k for k, v in index["weight_map"].items() if v == name} == set(tensors)
        total += ends[-1][1]
    assert index["metadata"]["total_size"] == total
    assert any(k.startswith("mtp.") for k in index["weight_map"])
    assert (top / BIG_SHARD).stat().st_size > 20 * MIB  # a mid-shard drop crosses a 10 MiB resume step
    assert (top / SMALL_SHARD).stat().st_size < 10 * MIB


# -- the HTTP contract ----------------------------------------------------------------------------


def test_api_answers_what_the_client_needs(mirror: hf_mirror.Running) -> None:
    status, _, body = http(mirror, f"/api/models/{REPO}")
    info = json.loads(body)
    assert status == 200 and info["id"] == REPO and info["sha"] == mirror.commit()
    v2 = mirror.commit("v2")
    assert v2 != info["sha"]
    # The revision arrives quoted; refs%2Fheads%2Fv2 must stay one segment.
    status, _, body = http(mirror, f"/api/models/{REPO}/revision/refs%2Fheads%2Fv2")
    assert status == 200 and json.loads(body)["sha"] == v2

    status, _, body = http(mirror, f"/api/models/{REPO}/tree/{v2}?recursive=true&expand=false")
    tree = json.loads(body)
    assert status == 200 and "NOTES.md" in {e["path"] for e in tree}
    for entry in tree:
        assert {"type", "path", "size", "oid", "lfs"} <= set(entry)
        assert set(entry["lfs"]) == {"oid", "size", "pointerSize"}
        assert not any("xet" in key.lower() for key in entry)
        data = (source(REPO, "v2") / entry["path"]).read_bytes()
        assert entry["lfs"]["oid"] == hashlib.sha256(data).hexdigest()
        assert entry["oid"] == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_resolve_serves_heads_and_ranges(mirror: hf_mirror.Running) -> None:
    data = (source(REPO) / SMALL_SHARD).read_bytes()
    url = f"/{REPO}/resolve/main/{SMALL_SHARD}"
    status, headers, body = http(mirror, url, "HEAD")
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == mirror.commit()
    assert headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert int(headers["Content-Length"]) == len(data) and headers["Accept-Ranges"] == "bytes"
    status, headers, body = http(mirror, url, headers={"Range": "bytes=1000-"})
    assert status == 206 and body == data[1000:]
    assert headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
    status, _, body = http(mirror, url, headers={"Range": "bytes=10-19"})
    assert status == 206 and body == data[10:20]
    status, headers, _ = http(mirror, url, headers={"Range": f"bytes={len(data)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(data)}"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/api/models/nobody/nothing/revision/main", "RepoNotFound"),
        (f"/api/models/{REPO}/revision/no-such-branch", "RevisionNotFound"),
        (f"/{REPO}/resolve/main/no-such-file.json", "EntryNotFound"),
        (f"/{REPO}/resolve/{'0' * 40}/config.json", "RevisionNotFound"),
    ],
)
def test_missing_things_get_hub_error_codes(mirror: hf_mirror.Running, path: str, code: str) -> None:
    status, headers, _ = http(mirror, path)
    assert status == 404 and headers["X-Error-Code"] == code
