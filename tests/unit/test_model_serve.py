"""vllm_rig/host/model_serve.py, run from the host zip on a free loopback port, spoken to over real HTTP."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import host_scripts
from vllm_rig.host import model_fetch, model_serve

RUN_TOKEN = "t" * 32  # the run's, in the server's environment
TOKEN = model_serve.follower_token(RUN_TOKEN, "rig2")  # the follower's, what it sends
REPO = "acme/tiny"
COMMIT = "c" * 40
SHARD = bytes(range(256)) * 4096  # 1 MiB


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    port: int
    dest: Path
    status_file: Path
    proc: subprocess.Popen[str]
    launched_ns: int  # just before the server started

    def get(self, path: str, token: str = TOKEN, **headers: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}", **headers})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()


def write_model(top: Path) -> None:
    top.mkdir(parents=True)
    (top / "model.safetensors").write_bytes(SHARD)
    (top / "config.json").write_text("{}")
    (top / "secret.txt").write_text("not listed")
    files = {
        name: {"size": (top / name).stat().st_size, "sha256": hashlib.sha256((top / name).read_bytes()).hexdigest()}
        for name in ("model.safetensors", "config.json")
    }
    marker = {"format": 1, "repo": REPO, "revision": "main", "commit": COMMIT, "files": files}
    (top / ".vllm-rig-complete.json").write_text(json.dumps(marker))


@contextlib.contextmanager
def serving(tmp_path: Path) -> Iterator[Served]:
    dest, status_file, port = tmp_path / "model", tmp_path / "fetch.json", free_port()
    argv = [*host_scripts.program("model_serve"), "--dest", str(dest), "--repo", REPO, "--revision", "main"]
    argv += ["--bind", "127.0.0.1", "--port", str(port), "--status-file", str(status_file), "--followers", "rig2"]
    env = {**os.environ, "VLLM_RIG_PEER_TOKEN": RUN_TOKEN}
    launched_ns = time.time_ns()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and "serving" in proc.stdout.readline()
    try:
        yield Served(port, dest, status_file, proc, launched_ns)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path) as started:
        yield started


def test_not_yet_while_the_model_is_not_there_then_ready_with_the_markers_files(served: Served) -> None:
    code, _, body = served.get("/v1/status")
    assert code == 503 and json.loads(body)["state"] == "fetching"
    write_model(served.dest)
    code, _, body = served.get("/v1/status")
    status = json.loads(body)
    assert code == 200 and status["state"] == "ready" and status["commit"] == COMMIT
    assert set(status["files"]) == {"model.safetensors", "config.json"}


FAILED = {"exit_code": 4, "message": "model.safetensors still corrupt"}


def test_own_failed_download_is_said_at_once_when_written_after_the_start(served: Served) -> None:
    model_fetch.write_json_atomic(served.status_file, FAILED)
    # The kernel stamps mtime from its coarse clock, which can read a few ms before the server's own start
    # time although the file was written after it (a CI run's follower waited 180 s on that).
    stamp = served.launched_ns - 10_000_000
    os.utime(served.status_file, ns=(stamp, stamp))
    code, _, body = served.get("/v1/status")
    assert code == 410 and json.loads(body)["message"] == "model.safetensors still corrupt"


def test_an_earlier_runs_verdict_is_stale_until_this_run_writes_one(tmp_path: Path) -> None:
    model_fetch.write_json_atomic(tmp_path / "fetch.json", FAILED)  # left by an earlier run
    with serving(tmp_path) as served:
        assert served.get("/v1/status")[0] == 503
        model_fetch.write_json_atomic(served.status_file, FAILED)  # the same bytes, written by this run
        code, _, body = served.get("/v1/status")
        assert code == 410 and json.loads(body)["message"] == "model.safetensors still corrupt"


def test_a_wrong_or_missing_token_is_refused(served: Served) -> None:
    write_model(served.dest)
    assert served.get("/v1/status", token="x" * 32)[0] == 401
    assert served.get("/v1/status", token=RUN_TOKEN)[0] == 401  # the run's token is no follower's
    assert served.get("/v1/status", token=model_serve.follower_token(RUN_TOKEN, "rig3"))[0] == 401
    assert served.get("/v1/files/config.json", token="")[0] == 401


def test_only_files_the_marker_lists_are_served(served: Served) -> None:
    write_model(served.dest)
    assert served.get("/v1/files/config.json")[2] == b"{}"
    assert served.get("/v1/files/secret.txt")[0] == 404
    assert served.get("/v1/files/.vllm-rig-complete.json")[0] == 404
    assert served.get("/v1/files/..%2F..%2Fetc%2Fpasswd")[0] == 404


def test_in_the_cache_layout_a_listed_file_is_served_through_its_blob_link_and_nothing_outside(
    served: Served,
) -> None:
    """model_dir -> hf-cache/models--o--n/snapshots/<commit>/, each file a link to ../../blobs/<etag>: served;
    a listed name whose link leads out of the repo's cache folder is not."""
    snapshot = served.dest.parent / "hf-cache" / "models--acme--tiny" / "snapshots" / COMMIT
    write_model(snapshot)
    blobs = snapshot.parent.parent / "blobs"
    blobs.mkdir()
    (snapshot / "model.safetensors").rename(blobs / hashlib.sha256(SHARD).hexdigest())
    (snapshot / "model.safetensors").symlink_to(f"../../blobs/{hashlib.sha256(SHARD).hexdigest()}")
    (served.dest.parent / "outside.json").write_text("{}")
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to("../../../../outside.json")
    served.dest.symlink_to(os.path.relpath(snapshot, served.dest.parent))
    assert served.get("/v1/files/model.safetensors")[2] == SHARD
    assert served.get("/v1/files/config.json")[0] == 404


def test_range_resumes_from_an_offset_and_a_range_past_the_end_is_refused(served: Served) -> None:
    write_model(served.dest)
    code, headers, body = served.get("/v1/files/model.safetensors", Range="bytes=1000-")
    assert code == 206 and body == SHARD[1000:]
    assert headers["Content-Range"] == f"bytes 1000-{len(SHARD) - 1}/{len(SHARD)}"
    code, _, body = served.get("/v1/files/model.safetensors", Range="bytes=10-19")
    assert code == 206 and body == SHARD[10:20]
    assert served.get("/v1/files/model.safetensors", Range=f"bytes={len(SHARD)}-")[0] == 416
    code, _, body = served.get("/v1/files/model.safetensors")
    assert code == 200 and body == SHARD


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    argv = [*host_scripts.program("model_serve"), "--dest", str(tmp_path), "--repo", REPO, "--revision", "main"]
    argv += ["--bind", "127.0.0.1", "--port", str(free_port()), "--followers", "rig2"]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_RIG_PEER_TOKEN"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "VLLM_RIG_PEER_TOKEN is not set" in result.stderr
    argv[argv.index("rig2")] = ""
    result = subprocess.run(argv, env={**env, "VLLM_RIG_PEER_TOKEN": RUN_TOKEN}, capture_output=True, text=True)
    assert result.returncode == 1 and "--followers names no host" in result.stderr


def _resolving(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    infos = [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in addresses]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *_a, **_k: infos)


def test_a_name_binds_its_first_lan_address_never_all(monkeypatch: pytest.MonkeyPatch) -> None:
    _resolving(monkeypatch, "127.0.1.1", "192.168.5.20", "192.168.5.21")
    assert model_serve.bind_address("rig1") == ("192.168.5.20", socket.AF_INET)
    assert model_serve.bind_address("fd00::7") == ("fd00::7", socket.AF_INET6)


def test_a_name_that_resolves_only_to_loopback_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _resolving(monkeypatch, "127.0.1.1", "::1")
    with pytest.raises(OSError, match="rig1 resolves to no address the other hosts can reach"):
        model_serve.bind_address("rig1")
