"""HttpStore (vllm_rig/stages/runtime/http_store.py) against the sandbox's real nginx store
(fixtures/artifact_store.py): upload, read, prune, and each failure as one line.

Each test works in its own directory of the store (nginx's location covers subdirectories), so the e2e's
artifacts at the top stay untouched.
"""

from __future__ import annotations

import base64
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox import paths, services
from tests.sandbox.fixtures import artifact_store
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime.http_store import HttpStore
from vllm_rig.stages.runtime.store import StoreError

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def server() -> str:
    services.up_one("artifact_store")
    return artifact_store.url()


@pytest.fixture
def sub(server: str) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}/"
    yield name
    for leftover in (artifact_store.files() / name).glob("*"):
        leftover.unlink()


def store(url: str, cache: Path, auth: str | None = None) -> HttpStore:
    return HttpStore(url, auth=auth or artifact_store.auth(), cache=cache)


def artifact(tmp: Path, tag: str) -> tuple[str, Path, Path]:
    """A real artifact (runtime_artifact.pack) of a small runtime tree; its fingerprint, archive, manifest."""
    runtime = tmp / f"runtime-{tag}"
    (runtime / "venv" / "lib").mkdir(parents=True)
    (runtime / "venv" / "lib" / "mod.py").write_text(f"ANSWER = {tag!r}\n" + "x" * 300_000)
    fp = (tag * 64)[:64]
    runtime_artifact.pack(runtime, fp, tmp / "packed")
    return fp, tmp / "packed" / runtime_artifact.archive_name(fp), tmp / "packed" / runtime_artifact.manifest_name(fp)


def test_put_then_manifest_and_archive_read_back_the_same_bytes(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "a")
    s = store(server + sub, tmp_path / "cache")
    s.put(fp, archive, manifest)
    assert s.manifest(fp) == manifest.read_bytes()
    got = s.archive(fp)
    assert got is not None and got.parent == tmp_path / "cache"
    assert got.read_bytes() == archive.read_bytes()
    on_server = artifact_store.files() / sub
    assert sorted(p.name for p in on_server.iterdir()) == sorted([archive.name, manifest.name])


def test_absent_artifact_is_none_not_an_error(server: str, sub: str, tmp_path: Path) -> None:
    s = store(server + sub, tmp_path / "cache")
    assert s.manifest("0" * 64) is None
    assert s.archive("0" * 64) is None
    assert s.prune(1) == []  # a store directory nobody uploaded to yet lists as empty


def test_manifest_without_archive_gives_no_archive(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "b")
    s = store(server + sub, tmp_path / "cache")
    s.put(fp, archive, manifest)
    (artifact_store.files() / sub / archive.name).unlink()
    assert s.manifest(fp) is not None
    assert s.archive(fp) is None  # partial: the host says so and compiles


def test_prune_keeps_the_newest_and_deletes_manifest_and_archive(server: str, sub: str, tmp_path: Path) -> None:
    s = store(server + sub, tmp_path / "cache")
    fps = []
    for age, tag in enumerate("cde"):
        fp, archive, manifest = artifact(tmp_path, tag)
        s.put(fp, archive, manifest)
        assert s.archive(fp) is not None  # into the cache too
        when = 1_700_000_000 + 100 * age  # distinct times: the listing has whole seconds
        os.utime(artifact_store.files() / sub / manifest.name, (when, when))
        fps.append(fp)
    assert s.prune(2) == [fps[0]]
    left = {p.name for p in (artifact_store.files() / sub).iterdir()}
    assert left == {n for f in fps[1:] for n in (runtime_artifact.archive_name(f), runtime_artifact.manifest_name(f))}
    assert not (tmp_path / "cache" / runtime_artifact.archive_name(fps[0])).exists()
    assert (tmp_path / "cache" / runtime_artifact.archive_name(fps[2])).exists()


def test_wrong_password_is_one_line_with_the_status_and_no_secret(server: str, sub: str, tmp_path: Path) -> None:
    s = store(server + sub, tmp_path / "cache", auth="rig:not-the-password")
    with pytest.raises(StoreError) as err:
        s.manifest("0" * 64)
    line = str(err.value)
    assert "HTTP 401" in line and server + sub in line and "\n" not in line
    assert "not-the-password" not in line


def test_a_server_that_is_down_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nobody listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = store(f"http://127.0.0.1:{port}/artifacts/", tmp_path / "cache", auth="rig:x")
    fp, archive, manifest = artifact(tmp_path, "f")
    with pytest.raises(StoreError) as err:
        s.put(fp, archive, manifest)
    line = str(err.value)
    assert line == f"store http://127.0.0.1:{port}/artifacts/: PUT {archive.name}: cannot connect (Connection refused)"


def test_a_half_upload_never_looks_whole(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "9")
    path = f"/artifacts/{sub}{archive.name}"
    body = archive.read_bytes()
    token = base64.b64encode(artifact_store.auth().encode()).decode()
    with socket.create_connection(("127.0.0.1", artifact_store.PORT)) as sock:  # a client that dies mid-upload
        head = f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body[: len(body) // 2])
    s = store(server + sub, tmp_path / "cache")
    assert s.manifest(fp) is None and s.archive(fp) is None
    assert not (artifact_store.files() / sub / archive.name).exists()  # nginx renames only a whole body


def test_short_archive_on_the_server_is_partial_in_one_line(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "7")
    s = store(server + sub, tmp_path / "cache")
    s.put(fp, archive, manifest)
    served = artifact_store.files() / sub / archive.name
    served.write_bytes(served.read_bytes()[:-10])
    with pytest.raises(StoreError, match=r"is \d+ bytes, its manifest says \d+: partial$"):
        s.archive(fp)
    assert not (tmp_path / "cache" / archive.name).exists()


def test_an_interrupted_download_resumes_and_a_stale_cache_is_fetched_again(
    server: str, sub: str, tmp_path: Path
) -> None:
    fp, archive, manifest = artifact(tmp_path, "6")
    cache = tmp_path / "cache"
    s = store(server + sub, cache)
    s.put(fp, archive, manifest)
    cache.mkdir()
    body = archive.read_bytes()
    (cache / f"{archive.name}.part").write_bytes(body[:1000])
    log = paths.STATE / "artifact-store" / "logs" / "access.log"
    before = log.stat().st_size
    assert (got := s.archive(fp)) is not None and got.read_bytes() == body
    assert f'GET /artifacts/{sub}{archive.name} HTTP/1.1" 206 ' in log.read_text()[before:]
    flipped = bytearray(body)
    flipped[5] ^= 0xFF
    got.write_bytes(bytes(flipped))  # same size, other bytes: not what the manifest names
    assert (again := s.archive(fp)) is not None and again.read_bytes() == body


def test_a_part_left_by_another_upload_is_not_joined_to_this_one(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "5")
    cache = tmp_path / "cache"
    s = store(server + sub, cache)
    s.put(fp, archive, manifest)
    cache.mkdir()
    (cache / f"{archive.name}.part").write_bytes(b"\0" * 1000)  # not the first 1000 bytes of this archive
    assert (got := s.archive(fp)) is not None and got.read_bytes() == archive.read_bytes()


def test_an_unwritable_cache_is_one_line(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "4")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = store(server + sub, blocker / "cache")
    s.put(fp, archive, manifest)
    with pytest.raises(StoreError, match=rf"^store {server + sub}: its cache {blocker / 'cache'}: Not a directory$"):
        s.archive(fp)


def test_https_is_verified_one_line_without_the_ca_and_works_with_it(server: str, sub: str, tmp_path: Path) -> None:
    fp, archive, manifest = artifact(tmp_path, "3")
    bare = HttpStore(artifact_store.tls_url() + sub, auth=artifact_store.auth(), cache=tmp_path / "cache")
    with pytest.raises(StoreError) as err:
        bare.put(fp, archive, manifest)
    assert str(err.value) == (
        f"store {artifact_store.tls_url() + sub}: PUT {archive.name}: "
        "TLS verification failed (runtime_artifact_store_ca names a CA bundle)"
    )
    trusted = HttpStore(
        artifact_store.tls_url() + sub, auth=artifact_store.auth(), ca=str(artifact_store.ca()), cache=tmp_path / "c"
    )
    trusted.put(fp, archive, manifest)
    assert trusted.manifest(fp) == manifest.read_bytes()
