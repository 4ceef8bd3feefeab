"""vllm_rig/host/model_preflight.py (stdlib only) against the HF mirror stand-in, run the way the preflight fact runs
it: the host's python3 reading the token line and the script from stdin."""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.sandbox.fixtures import hf_mirror
from vllm_rig.host import model_preflight
from vllm_rig.stages.model.facts import ModelPreflight, parse_preflight, preflight_stdin

REPO = hf_mirror.REPO
BIG_SHARD = "model-00001-of-00003.safetensors"
HEADROOM = 256 << 20


mp = model_preflight


Mirror = hf_mirror.Running
source = hf_mirror.source


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    yield from hf_mirror.serving(tmp_path_factory.mktemp("hf-mirror-state"))


@pytest.fixture
def mirror(served: Mirror) -> Mirror:
    return served.reset()


def total(branch: str = "main") -> int:
    return sum(p.stat().st_size for p in source(branch).iterdir())


def run_as_the_fact(mirror: Mirror, dest: Path, repo: str = REPO, revision: str = "main", token: str | None = None):
    """The fact's own command line, run here: python3 -c <bootstrap> ... with the script on stdin."""
    command = ModelPreflight().command(mirror.url, repo, revision, str(dest))
    started = time.monotonic()
    stdin = "".join(preflight_stdin(token).readlines())
    proc = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=60)
    return parse_preflight(proc.stdout.splitlines()), proc.stdout + proc.stderr, time.monotonic() - started


def test_plan_for_a_fresh_dir(mirror: Mirror, tmp_path: Path) -> None:
    verdict, output, elapsed = run_as_the_fact(mirror, tmp_path / "models" / "model")
    commit = mirror.commit()
    assert verdict["ok"] and verdict["state"] == "fetch" and verdict["commit"] == commit, output
    assert verdict["total_bytes"] == total() and verdict["file_count"] == len(list(source().iterdir()))
    assert verdict["need_bytes"] == total() + HEADROOM and verdict["where"] == str(tmp_path)
    paths_asked = [r["path"] for r in mirror.log()]
    assert paths_asked == [f"/api/models/{REPO}/revision/main", f"/api/models/{REPO}/tree/{commit}?recursive=true"]
    print(f"\npreflight against the mirror: {elapsed:.2f}s")


def test_complete_marker_answers_without_the_network(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "model"
    dest.mkdir()
    files = {}
    for name in ("config.json", "tokenizer.json"):
        (dest / name).write_bytes((source() / name).read_bytes())
        files[name] = {"size": (dest / name).stat().st_size, "sha256": "x"}
    marker = {"format": 1, "repo": REPO, "revision": "main", "commit": "c" * 40, "total_bytes": 9, "files": files}
    (dest / ".vllm-rig-complete.json").write_text(json.dumps(marker))
    mirror.set_knobs(down="refuse")
    verdict, output, _ = run_as_the_fact(mirror, dest)
    assert verdict["ok"] and verdict["state"] == "complete" and verdict["commit"] == "c" * 40, output
    assert mirror.log() == []
    # A file of the wrong size, or another revision, is not complete: the endpoint is asked (and is down).
    (dest / "config.json").write_bytes(b"{}")
    verdict, _, _ = run_as_the_fact(mirror, dest)
    assert not verdict["ok"] and verdict["kind"] == "unreachable"
    assert run_as_the_fact(mirror, dest, revision="v2")[0]["kind"] == "unreachable"


def test_files_already_there_are_not_asked_for_again(mirror: Mirror, tmp_path: Path) -> None:
    """A blob huggingface_hub's cache holds (another revision's, a cut download's whole files) is not downloaded
    again; neither is a file of the right size in the model directory (the fetch adopts it)."""
    dest = tmp_path / "model"
    data = (source() / BIG_SHARD).read_bytes()
    blobs = tmp_path / "hf-cache" / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    dest.mkdir()
    (dest / "config.json").write_bytes((source() / "config.json").read_bytes())
    verdict, _, _ = run_as_the_fact(mirror, dest)
    have = len(data) + (source() / "config.json").stat().st_size
    assert verdict["need_bytes"] == total() - have + HEADROOM


def test_small_disk_is_refused_with_what_it_needs(monkeypatch: pytest.MonkeyPatch, mirror: Mirror) -> None:
    monkeypatch.setattr(mp.shutil, "disk_usage", lambda _: SimpleNamespace(total=1 << 30, free=100 << 20))
    verdict = mp.verdict(mirror.url, REPO, "main", Path("/nonexistent/models/model"))
    assert not verdict["ok"] and verdict["kind"] == "disk"
    assert verdict["problem"].startswith(f"{REPO}@") and "needs 304.9 MiB in /, 100.0 MiB free" in verdict["problem"]


@pytest.mark.parametrize(
    ("knobs", "repo", "revision", "kind", "says"),
    [
        ({}, "nobody/nothing", "main", "endpoint", "repository not found at"),
        ({}, REPO, "no-such-branch", "endpoint", "no such revision at"),
        ({"unknown_repos": "404-bare"}, "nobody/nothing", "main", "endpoint", "not found at"),
        ({"down": "503"}, REPO, "main", "unreachable", "answered HTTP 503"),
        ({"down": "refuse"}, REPO, "main", "unreachable", "could not reach"),
    ],
)
def test_unknown_or_unreachable_gives_one_line_naming_repo_and_endpoint(
    mirror: Mirror, tmp_path: Path, knobs: dict[str, Any], repo: str, revision: str, kind: str, says: str
) -> None:
    mirror.set_knobs(**knobs)
    verdict, output, elapsed = run_as_the_fact(mirror, tmp_path / "model", repo=repo, revision=revision)
    assert not verdict["ok"] and verdict["kind"] == kind, output
    assert verdict["problem"].startswith(f"{repo}@{revision}: ") and mirror.url in verdict["problem"]
    assert says in verdict["problem"] and "\n" not in verdict["problem"]
    assert elapsed < 10 and not (tmp_path / "model").exists()


def test_token_is_sent_only_when_configured_and_never_printed(mirror: Mirror, tmp_path: Path) -> None:
    token = f"hf_{secrets.token_hex(16)}"
    verdict, output, _ = run_as_the_fact(mirror, tmp_path / "model", token=token)
    assert verdict["ok"] and token not in output
    seen = mirror.server.authorizations
    assert seen and set(seen) == {f"Bearer {token}"}
    seen.clear()
    missing, output, _ = run_as_the_fact(mirror, tmp_path / "model", repo="nobody/nothing", token=token)
    assert not missing["ok"] and token not in output
    seen.clear()
    assert run_as_the_fact(mirror, tmp_path / "model")[0]["ok"]
    assert seen and set(seen) == {None}
