"""The HF mirror against the real `hf` CLI (huggingface_hub 2.4.0): downloads, resume, faults, verify."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox import paths
from tests.sandbox.fixtures import hf_mirror
from tests.sandbox.fixtures.hf_mirror import generate
from tests.sandbox.fixtures.hf_mirror.server import MirrorServer

REPO = "nerkyor/Qwen3.6-27B-DSV4Pro-Thinking-Distill-FP8"
SECOND_REPO = "Qwen/Qwen3.8-27B-FP8"
BIG_SHARD = "model-00001-of-00003.safetensors"
SMALL_SHARD = "model-00002-of-00003.safetensors"
MIB = 1 << 20
HF = Path(sys.executable).with_name("hf")


@dataclass
class Mirror:
    server: MirrorServer
    knobs_file: Path
    log_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def set_knobs(self, **knobs: Any) -> None:
        hf_mirror.write_knobs(self.knobs_file, knobs)

    def knobs(self) -> dict[str, Any]:
        return hf_mirror.read_knobs(self.knobs_file)

    def log(self) -> list[dict[str, Any]]:
        if not self.log_file.exists():
            return []
        return [json.loads(line) for line in self.log_file.read_text().splitlines()]

    def gets(self, file_path: str) -> list[dict[str, Any]]:
        return [r for r in self.log() if r["method"] == "GET" and r["path"].endswith(f"/{file_path}")]

    def commit(self, repo: str, branch: str = "main") -> str:
        revision = self.server.store.revision(repo, branch)
        assert revision is not None
        return revision.commit


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    """The mirror on a free port, serving the rig's built repos, with its own knobs and log."""
    hf_mirror.build()
    state = tmp_path_factory.mktemp("hf-mirror-state")
    layout = hf_mirror.Layout(paths.WWW / "hf", state / "knobs.json", state / "log.jsonl")
    server, thread = hf_mirror.start_in_thread(0, layout)
    yield Mirror(server, layout.knobs, layout.log)
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def mirror(served: Mirror) -> Mirror:
    """Each test starts with no knobs and an empty log."""
    served.set_knobs()
    served.log_file.write_text("")
    return served


def source(repo: str, branch: str = "main") -> Path:
    return paths.WWW.joinpath("hf", *repo.split("/"), branch)


def digests(directory: Path) -> dict[str, str]:
    """sha256 of every file under a directory, ignoring the client's .cache bookkeeping."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and ".cache" not in p.relative_to(directory).parts
    }


def run_hf(mirror: Mirror, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real CLI against the mirror; HF_HOME in tmp so no token or cache leaks in."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    clean.update(
        HF_ENDPOINT=mirror.url,
        HF_HOME=str(home),
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_PROXY="127.0.0.1,localhost",
        **env,
    )
    return subprocess.run([str(HF), *args], env=clean, capture_output=True, text=True, timeout=120)


def download(mirror: Mirror, tmp: Path, repo: str = REPO, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_hf(mirror, tmp / "home", "download", repo, "--local-dir", str(tmp / "out"), *extra, **env)


def http(
    mirror: Mirror, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, Any, bytes]:
    """(status, headers, body) without raising on error statuses."""
    request = urllib.request.Request(mirror.url + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


# -- the generated repos --------------------------------------------------------------------------


def test_build_is_idempotent_and_deterministic(served: Mirror, tmp_path: Path) -> None:
    started = time.monotonic()
    assert generate.build_repos(paths.WWW / "hf") is False  # already built: nothing to do
    assert time.monotonic() - started < 1.0
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
def test_repo_is_laid_out_like_the_fp8_checkpoint(served: Mirror, repo: str) -> None:
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


def test_api_answers_what_the_client_needs(mirror: Mirror) -> None:
    status, _, body = http(mirror, f"/api/models/{REPO}")
    info = json.loads(body)
    assert status == 200 and info["id"] == REPO and info["sha"] == mirror.commit(REPO)
    v2 = mirror.commit(REPO, "v2")
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


def test_resolve_serves_heads_and_ranges(mirror: Mirror) -> None:
    data = (source(REPO) / SMALL_SHARD).read_bytes()
    url = f"/{REPO}/resolve/main/{SMALL_SHARD}"
    status, headers, body = http(mirror, url, "HEAD")
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == mirror.commit(REPO)
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
def test_missing_things_get_hub_error_codes(mirror: Mirror, path: str, code: str) -> None:
    status, headers, _ = http(mirror, path)
    assert status == 404 and headers["X-Error-Code"] == code


# -- the real client ------------------------------------------------------------------------------


def test_full_download_matches_source_and_verifies(mirror: Mirror, tmp_path: Path) -> None:
    started = time.monotonic()
    result = download(mirror, tmp_path)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert digests(tmp_path / "out") == digests(source(REPO))
    files = list(source(REPO).iterdir())
    size = sum(p.stat().st_size for p in files)
    print(f"\nunthrottled download of {size / MIB:.1f} MiB ({len(files)} files): {elapsed:.2f}s")
    # Every file fetched exactly once, whole.
    assert all(len(mirror.gets(name)) == 1 for name in digests(source(REPO)))
    verify = run_hf(mirror, tmp_path / "home", "cache", "verify", REPO, "--local-dir", str(tmp_path / "out"))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_rerun_of_unchanged_repo_fetches_nothing(mirror: Mirror, tmp_path: Path) -> None:
    assert download(mirror, tmp_path).returncode == 0
    mirror.log_file.write_text("")
    assert download(mirror, tmp_path).returncode == 0
    assert [r["path"] for r in mirror.log() if "/resolve/" in r["path"] or "/tree/" in r["path"]] == []


def test_revision_by_sha_and_branch(mirror: Mirror, tmp_path: Path) -> None:
    result = download(mirror, tmp_path, SECOND_REPO, "--revision", mirror.commit(SECOND_REPO))
    assert result.returncode == 0, result.stderr
    assert digests(tmp_path / "out") == digests(source(SECOND_REPO))
    v2 = tmp_path / "v2"
    result = download(mirror, v2, REPO, "--revision", mirror.commit(REPO, "v2"))
    assert result.returncode == 0, result.stderr
    assert digests(v2 / "out") == digests(source(REPO, "v2"))


def test_single_file_download(mirror: Mirror, tmp_path: Path) -> None:
    result = download(mirror, tmp_path, REPO, "config.json")
    assert result.returncode == 0, result.stderr
    assert digests(tmp_path / "out") == {"config.json": digests(source(REPO))["config.json"]}
    assert [(r["method"], r["path"]) for r in mirror.log() if "/resolve/" in r["path"]] == [
        ("HEAD", f"/{REPO}/resolve/main/config.json"),
        ("GET", f"/{REPO}/resolve/main/config.json"),
    ]


def test_drop_mid_shard_resumes_from_the_last_10_mib_step(mirror: Mirror, tmp_path: Path) -> None:
    mirror.set_knobs(drop_after_bytes={"path": BIG_SHARD, "bytes": 15_000_000})
    result = download(mirror, tmp_path)
    assert result.returncode == 0, result.stderr
    assert digests(tmp_path / "out") == digests(source(REPO))
    assert mirror.knobs()["drop_after_bytes"]["fired"] is True
    gets = mirror.gets(BIG_SHARD)
    assert [g["bytes"] for g in gets][0] == 15_000_000 and "dropped at 15000000" in gets[0]["events"]
    assert gets[-1]["status"] == 206 and gets[-1]["range"] == f"bytes={10 * MIB}-"
    refetched = sum(g["bytes"] for g in gets) - (source(REPO) / BIG_SHARD).stat().st_size
    assert 0 < refetched <= 10 * MIB


def test_stall_mid_body_times_out_and_resumes(mirror: Mirror, tmp_path: Path) -> None:
    mirror.set_knobs(stall_after_bytes={"path": BIG_SHARD, "bytes": 12 * MIB, "seconds": 4})
    result = download(mirror, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="2")
    assert result.returncode == 0, result.stderr
    assert digests(tmp_path / "out") == digests(source(REPO))
    # The stalled response is logged when its handler wakes up and finds the client gone.
    deadline = time.monotonic() + 10
    while len(mirror.gets(BIG_SHARD)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    stalled, resumed = sorted(mirror.gets(BIG_SHARD), key=lambda g: g["ts"] - g["ms"] / 1000)
    assert stalled["range"] is None and any(e.startswith("stalled") for e in stalled["events"])
    assert resumed["status"] == 206 and resumed["range"] == f"bytes={10 * MIB}-"


def test_corrupt_file_is_accepted_by_download_but_caught_by_verify(mirror: Mirror, tmp_path: Path) -> None:
    mirror.set_knobs(corrupt=[SMALL_SHARD])
    result = download(mirror, tmp_path)
    assert result.returncode == 0, result.stderr  # the client checks sizes only
    got, want = (tmp_path / "out" / SMALL_SHARD).read_bytes(), (source(REPO) / SMALL_SHARD).read_bytes()
    assert len(got) == len(want) and sum(a != b for a, b in zip(got, want, strict=True)) == 1
    verify = run_hf(mirror, tmp_path / "home", "cache", "verify", REPO, "--local-dir", str(tmp_path / "out"))
    assert verify.returncode != 0
    assert SMALL_SHARD in verify.stdout + verify.stderr


def test_unknown_repo_fails_with_repo_not_found(mirror: Mirror, tmp_path: Path) -> None:
    result = download(mirror, tmp_path, "nobody/nothing")
    assert result.returncode != 0
    assert "not found" in (result.stdout + result.stderr).lower()
    assert [r["status"] for r in mirror.log() if "/api/models/" in r["path"]] == [404]


@pytest.mark.parametrize("mode", ["503", "refuse"])
def test_down_mirror_fails_a_fresh_download(mirror: Mirror, tmp_path: Path, mode: str) -> None:
    mirror.set_knobs(down=mode)
    result = download(mirror, tmp_path)
    assert result.returncode != 0
    assert not list((tmp_path / "out").glob("*.safetensors"))


def test_down_mirror_with_an_old_local_dir_exits_zero(mirror: Mirror, tmp_path: Path) -> None:
    """The trap the deploy must guard against: rc 0 without contacting a working mirror."""
    assert download(mirror, tmp_path).returncode == 0
    mirror.set_knobs(down="503")
    result = download(mirror, tmp_path)
    assert result.returncode == 0
    assert {r["status"] for r in mirror.log() if r["path"].startswith("/api/models/")} == {200, 503}


def test_throttle_sets_the_download_time(mirror: Mirror, tmp_path: Path) -> None:
    target_s = 6.0
    size = sum(p.stat().st_size for p in source(REPO).iterdir())
    mirror.set_knobs(throttle_bytes_per_s=int(size / target_s))
    started = time.monotonic()
    result = download(mirror, tmp_path)
    elapsed = time.monotonic() - started
    print(f"\nthrottled download: {elapsed:.2f}s for a target of {target_s}s")
    assert result.returncode == 0, result.stderr
    assert target_s * 0.7 <= elapsed <= target_s * 1.3


# -- the command line -----------------------------------------------------------------------------


def test_serve_command_runs_in_the_foreground(tmp_path: Path) -> None:
    root = tmp_path / ".sandbox"
    command = [
        sys.executable,
        "-m",
        "tests.sandbox.fixtures.hf_mirror",
        "serve",
        "--port",
        "0",
        "--root",
        str(root),
    ]
    proc = subprocess.Popen(command, cwd=paths.REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(re.search(r":(\d+)$", line.strip()).group(1))  # type: ignore[union-attr]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models/{REPO}", timeout=10) as response:
            assert json.loads(response.read())["id"] == REPO
        assert (root / "www" / "hf" / REPO / "main" / BIG_SHARD).is_file()
        log = root / "state" / "hf_mirror.log"
        deadline = time.monotonic() + 5  # the server logs just after it answers: the file may exist, still empty
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(log.read_text().splitlines()[-1])["status"] == 200
    finally:
        proc.terminate()
        proc.wait(10)
    shutil.rmtree(root, ignore_errors=True)
