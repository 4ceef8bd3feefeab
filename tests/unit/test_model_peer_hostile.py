"""A hostile model peer, and a hostile follower, on loopback (issue 35, "The network").

The follower's side (vllm_rig/host/model_peer.py): a 206 with no length that never ends writes no more than
the file's listed size and the peer is no use; a status answer that is a JSON list, or file entries that are
not objects, are "this peer is no use" (PeerUnused, which model_fetch.py says in one line before it fetches
from the endpoint), never an AttributeError. The serving side (vllm_rig/host/model_serve.py): a Range header
with thousands of digits gets 416, not a dropped connection.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from vllm_rig.host import model_serve
from vllm_rig.host.model_peer import PART_DIR, Peer, PeerUnused, Want

COMMIT = "c" * 40


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _peer(url: str) -> Peer:
    return Peer("hostile", url, "t" * 32, wait_s=1.0)


class Endless(BaseHTTPRequestHandler):
    """206 with no Content-Length, then bytes until the client hangs up."""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(206)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for _ in range(64 * 1024):  # 64 MiB at most, if the client never stops reading
                self.wfile.write(b"x" * 1024)
        except OSError:
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endless() -> Iterator[str]:
    yield from _serve(Endless)


def test_a_never_ending_206_writes_no_more_than_the_listed_size(tmp_path: Path, endless: str) -> None:
    with pytest.raises(PeerUnused, match="more than the 10 bytes"):
        _peer(endless)._fetch_file(tmp_path, Want("config.json", 10))
    part = tmp_path / PART_DIR / "config.json.part"
    assert part.stat().st_size <= 10
    assert not (tmp_path / "config.json").exists()


def _status_handler(body: Any) -> type[BaseHTTPRequestHandler]:
    class Status(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Status


@pytest.mark.parametrize(
    "body",
    [
        ["ready", COMMIT],
        {"state": "ready", "commit": COMMIT, "files": ["config.json"]},
        {"state": "ready", "commit": COMMIT, "files": {"config.json": 10}},
        {"state": "ready", "commit": COMMIT, "files": {"config.json": ["size", 10]}},
        "ready",
    ],
    ids=["list", "files-list", "entry-number", "entry-list", "string"],
)
def test_a_malformed_status_means_the_peer_is_no_use(body: Any) -> None:
    for url in _serve(_status_handler(body)):
        with pytest.raises(PeerUnused) as err:
            _peer(url).wait_ready(COMMIT, lambda _line: None)
        assert "\n" not in str(err.value)


def test_a_well_formed_status_still_offers_its_files() -> None:
    body = {"state": "ready", "commit": COMMIT, "files": {"config.json": {"size": 10}}}
    for url in _serve(_status_handler(body)):
        assert _peer(url).wait_ready(COMMIT, lambda _line: None) == {"config.json": {"size": 10}}


class OneFile(model_serve.Model):
    def __init__(self, path: Path) -> None:
        self.path = path

    def file(self, path: str) -> Path | None:
        return self.path if path == "config.json" else None


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[str, int]]:
    (tmp_path / "config.json").write_bytes(b"0123456789")
    followers = model_serve.Followers("r" * 32, ["follower"])
    server = model_serve.Server(("127.0.0.1", 0), OneFile(tmp_path / "config.json"), followers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield followers.tokens["follower"], server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _ask(port: int, token: str, rng: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/files/config.json", headers={"Authorization": f"Bearer {token}", "Range": rng})
    response = conn.getresponse()
    return response.status, response.read()


@pytest.mark.parametrize(
    "rng", ["bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=0-1,3-4", "bytes=-3", "lines=0-1"]
)
def test_a_range_it_does_not_read_is_416_not_a_dropped_connection(
    serving: tuple[str, int], rng: str, capsys: pytest.CaptureFixture[str]
) -> None:
    token, port = serving
    assert _ask(port, token, rng)[0] == 416
    assert "Traceback" not in capsys.readouterr().err


def test_a_range_it_reads_is_still_206(serving: tuple[str, int]) -> None:
    token, port = serving
    assert _ask(port, token, "bytes=4-") == (206, b"456789")
    assert _ask(port, token, "bytes=2-3") == (206, b"23")
