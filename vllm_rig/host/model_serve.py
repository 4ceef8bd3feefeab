#!/usr/bin/env python3
"""Serve this host's verified model, read-only, to the other rigs of one deploy (standard library only).

    model_serve.py --dest DIR --repo R --revision REV --bind ADDR --port N --followers A,B
                   [--status-file F] [--idle-exit-s S] [--first-ask-s S]

VLLM_RIG_PEER_TOKEN in the environment (the unit's 0600 EnvironmentFile) is the run's token, new every run
that needs it. It is never sent: each follower sends its own, `Authorization: Bearer <follower_token(run
token, its name)>` (an HMAC, so the source alone can tell the followers apart and a token sniffed from one
follower names that follower only). A follower that reports done (POST /v1/done: it has what it takes from
this peer, or gave up on it) has its token refused from then on. The server stops by itself, whichever comes
first: every follower reported done; no request of a follower for --idle-exit-s (none in flight), or none at
all within --first-ask-s of the start; the unit's RuntimeMaxSec (the deploy's bound); and the deploy stops it
once the run's downloads are done.

    GET  /v1/status       200 {"state": "ready", repo, revision, commit, files: {path: {size, sha256}}}
                          503 {"state": "fetching", phase, bytes_done, bytes_total}: not yet, ask again
                          410 {"state": "failed", message}: this host's own download failed during this serve
    GET  /v1/files/<path> the bytes of a file the marker lists (Range: bytes=N- or N-M answers 206)
    POST /v1/done         200 {"state": "done", "waiting_for": [followers not done yet]}

Only files listed in the completion marker model_fetch.py writes after every file's hash matched are served;
the fetching host checks each file's sha256 again against the plan it resolved from the endpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .model_fetch import marker_matches, read_marker

TOKEN_ENV = "VLLM_RIG_PEER_TOKEN"
# Offsets of up to 19 digits (a file is less than 2**63 bytes): a longer one is 416, never int()'s ValueError.
RANGE = re.compile(r"bytes=(\d{1,19})-(\d{0,19})")
IDLE_EXIT_S = 120.0  # no follower asked for this long: none is left that needs this server
FIRST_ASK_S = 900.0  # before the first request: a follower may hash a large staging dir before it asks
WATCH_S = 1.0


def follower_token(run_token: str, follower: str) -> str:
    """The token `follower` (its inventory name) sends: HMAC-SHA256 of its name under the run's token."""
    return hmac.new(run_token.encode(), f"vllm-rig model peer follower {follower}".encode(), hashlib.sha256).hexdigest()


def file_identity(path: Path | None) -> tuple[int, int, int] | None:
    """Which file is at `path` (inode, mtime, size), None where none is. model_fetch.py replaces its status
    file whole on every write, so a new verdict is a new identity: no clock is compared (a file's mtime
    comes from the kernel's coarse clock and can read earlier than a time.time() taken before the write)."""
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Model:
    """What is served: the marker of DIR (re-read on each request: DIR may switch while this runs)."""

    def __init__(self, dest: Path, repo: str, revision: str, status_file: Path | None) -> None:
        self.dest, self.repo, self.revision, self.status_file = dest, repo, revision, status_file
        self.stale = file_identity(status_file)  # the verdict already there belongs to an earlier run

    def marker(self) -> dict[str, Any] | None:
        """The completion marker model_fetch.py wrote, when it is of this repo and revision."""
        data = read_marker(self.dest)
        return data if marker_matches(data, self.repo, self.revision) else None

    def status(self) -> tuple[int, dict[str, Any]]:
        marker = self.marker()
        if marker is not None:
            held = {k: marker.get(k) for k in ("repo", "revision", "commit", "files")}
            return HTTPStatus.OK, {"state": "ready", **held}
        fetch = self._own_fetch()
        if fetch.get("exit_code") not in (None, 0):
            return HTTPStatus.GONE, {"state": "failed", "message": fetch.get("message") or "the download failed"}
        progress = {k: fetch.get(k) for k in ("phase", "bytes_done", "bytes_total")}
        return HTTPStatus.SERVICE_UNAVAILABLE, {"state": "fetching", **progress}

    def _own_fetch(self) -> dict[str, Any]:
        """This host's download status, if written since this server started (an older verdict is stale)."""
        if self.status_file is None or file_identity(self.status_file) in (None, self.stale):
            return {}
        try:
            data = json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def file(self, path: str) -> Path | None:
        """The file to send, only when the marker lists it (so nothing else of the box can be named)."""
        marker = self.marker()
        if marker is None or path not in (marker.get("files") or {}):
            return None
        top = self.dest.resolve()
        # In huggingface_hub's cache a snapshot's files are links to blobs/ beside snapshots/: that folder bounds it.
        inside = top.parent.parent if top.parent.name == "snapshots" else top
        found = (top / path).resolve()
        return found if found.is_relative_to(inside) and found.is_file() else None


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "vllm-rig-model-serve"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        follower = self._follower()
        if follower is None:
            return
        with self.server.followers.serving():
            path = urlsplit(self.path).path
            if path == "/v1/status":
                self._json(*self.server.model.status())
            elif path.startswith("/v1/files/"):
                self._send_file(unquote(path.removeprefix("/v1/files/")))
            else:
                self._json(HTTPStatus.NOT_FOUND, {"state": "unknown", "message": f"no such path {path}"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        follower = self._follower()
        if follower is None:
            return
        with self.server.followers.serving():
            path = urlsplit(self.path).path
            if path != "/v1/done":
                self._json(HTTPStatus.NOT_FOUND, {"state": "unknown", "message": f"no such path {path}"})
                return
            left = self.server.followers.done(follower)
            self.log_message("%s is done with this peer; waiting for %s", follower, ", ".join(left) or "nobody")
            self._json(HTTPStatus.OK, {"state": "done", "waiting_for": left})

    def _follower(self) -> str | None:
        """The follower whose token came, or None after a 401 was sent (no token, a wrong one, or one whose
        follower reported done)."""
        sent = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        follower = self.server.followers.of(sent)
        if follower is None:
            self._json(HTTPStatus.UNAUTHORIZED, {"state": "refused", "message": "wrong or missing token"})
        elif follower in self.server.followers.finished:
            self._json(HTTPStatus.UNAUTHORIZED, {"state": "refused", "message": "this follower reported done"})
            return None
        return follower

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_file(self, rel: str) -> None:
        found = self.server.model.file(rel)
        if found is None:
            self._json(HTTPStatus.NOT_FOUND, {"state": "unknown", "message": f"{rel} is not a verified file here"})
            return
        size = found.stat().st_size
        start, end = 0, size - 1
        asked = self.headers.get("Range")
        wanted = RANGE.fullmatch(asked.strip()) if asked is not None else None
        if asked is not None and not wanted:
            self._unsatisfiable(size)
            return
        if wanted:
            start = int(wanted.group(1))
            end = min(int(wanted.group(2)), size - 1) if wanted.group(2) else size - 1
            if start >= size or start > end:
                self._unsatisfiable(size)
                return
        self.send_response(HTTPStatus.PARTIAL_CONTENT if wanted else HTTPStatus.OK)
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.log_message("sending %s bytes %d-%d of %d", rel, start, end, size)  # a resume shows here
        with found.open("rb") as f:
            self.connection.sendfile(f, start, end - start + 1)

    def _unsatisfiable(self, size: int) -> None:
        """416 for a range past the end, or one this server does not read (many ranges, huge numbers)."""
        self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
        self.send_header("Content-Range", f"bytes */{size}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        print(f"model_serve: {self.address_string()} {format % args}", file=sys.stderr, flush=True)


class Followers:
    """The hosts this server is for: each one's token, who said it is done, and how long since any asked."""

    def __init__(
        self,
        run_token: str,
        names: list[str],
        idle_exit_s: float = IDLE_EXIT_S,
        clock: Callable[[], float] = time.monotonic,
        first_ask_s: float = FIRST_ASK_S,
    ) -> None:
        self.tokens = {name: follower_token(run_token, name) for name in names}
        self.finished: set[str] = set()
        self.idle_exit_s, self.first_ask_s = idle_exit_s, max(first_ask_s, idle_exit_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._asked = False
        self._last = clock()
        self.changed = threading.Event()  # set by done(): the watcher looks at once

    def of(self, sent: str) -> str | None:
        """The follower `sent` is the token of; every token is compared, in constant time each."""
        found = None
        for name, token in self.tokens.items():
            if sent and hmac.compare_digest(sent.encode(), token.encode()):
                found = name
        return found

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """A follower's request: counted while it runs, so sending a long file is not idle time."""
        with self._lock:
            self._in_flight += 1
            self._asked = True
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._last = self._clock()
            self.changed.set()  # the last follower's done is answered now: the watcher looks again

    def done(self, follower: str) -> list[str]:
        """`follower` has what it takes from this peer: its token is refused from now on. The followers left."""
        with self._lock:
            self.finished.add(follower)
            left = sorted(set(self.tokens) - self.finished)
        self.changed.set()
        return left

    def stop_reason(self) -> str | None:
        """Why the server should stop now, or None."""
        with self._lock:
            # only once no request is in flight: the last follower's own done must get its answer first
            if self.finished >= set(self.tokens) and self._in_flight == 0:
                return f"every follower ({', '.join(sorted(self.tokens))}) reported done"
            idle = self._clock() - self._last
            if not self._asked and idle >= self.first_ask_s:
                return f"no follower asked within {self.first_ask_s:g} s of the start"
            if self._asked and self._in_flight == 0 and idle >= self.idle_exit_s:
                return f"no follower asked for {self.idle_exit_s:g} s"
        return None


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: Model, followers: Followers) -> None:
        self.model, self.followers = model, followers
        self.why_stopped = ""
        super().__init__(address, Handler)

    def watch(self) -> None:
        """Stop the server (from this thread: shutdown() waits for serve_forever) once there is a reason."""
        while True:
            why = self.followers.stop_reason()
            if why:
                self.why_stopped = why
                self.shutdown()
                return
            self.followers.changed.wait(WATCH_S)
            self.followers.changed.clear()


def bind_address(name: str) -> tuple[str, int]:
    """(address, family) to listen on: the one address peers use. A name is resolved here, on the host, and
    its first address that is not loopback is bound (a box's own name often resolves to 127.0.1.1 on itself,
    which the peers cannot reach); never every address. OSError when the name gives no such address."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        found = [ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)]
        usable = [a for a in found if not a.is_loopback and not a.is_unspecified]
        if not usable:
            raise OSError(
                f"{name} resolves to no address the other hosts can reach ({', '.join(map(str, found))})"
            ) from None
        address = usable[0]
    return str(address), socket.AF_INET6 if address.version == 6 else socket.AF_INET


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="model_serve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="the model directory (model_dir)")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--bind", required=True, help="the address the other rigs reach this one at")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--followers", required=True, help="the hosts (inventory names, comma-separated) served")
    parser.add_argument("--status-file", default=None, help="this host's own download status (model_fetch.py)")
    parser.add_argument("--idle-exit-s", type=float, default=IDLE_EXIT_S, help="stop after this long unasked")
    parser.add_argument("--first-ask-s", type=float, default=FIRST_ASK_S, help="stop if nobody asked by then")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        print(f"model_serve: {TOKEN_ENV} is not set (at least 16 characters); refusing to serve", file=sys.stderr)
        return 1
    followers = [name for name in args.followers.split(",") if name]
    if not followers:
        print("model_serve: --followers names no host; refusing to serve", file=sys.stderr)
        return 1
    status_file = Path(args.status_file) if args.status_file else None
    model = Model(Path(args.dest).absolute(), args.repo, args.revision, status_file)
    try:
        address, family = bind_address(args.bind)
        Server.address_family = family
        server = Server(
            (address, args.port), model, Followers(token, followers, args.idle_exit_s, first_ask_s=args.first_ask_s)
        )
    except OSError as err:
        print(f"model_serve: cannot listen on {args.bind}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(
        f"model_serve: serving {args.repo}@{args.revision} from {model.dest} on {address}:{args.port} "
        f"to {', '.join(followers)}",
        flush=True,
    )
    threading.Thread(target=server.watch, daemon=True).start()
    server.serve_forever()
    server.server_close()
    print(f"model_serve: stopped: {server.why_stopped}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
