#!/usr/bin/env python3
"""Serve this host's verified model, read-only, to the other rigs of one deploy (standard library only).

    model_serve.py --dest DIR --repo R --revision REV --bind ADDR --port N [--status-file F]

The token peers must send (`Authorization: Bearer <token>`) is VLLM_RIG_PEER_TOKEN in the environment (the
unit's 0600 EnvironmentFile; a new one every run that needs it). The deploy runs this as a transient unit whose
RuntimeMaxSec bounds its life and stops it once the run's downloads are done.

    GET /v1/status       200 {"state": "ready", repo, revision, commit, files: {path: {size, sha256}}}
                         503 {"state": "fetching", phase, bytes_done, bytes_total}: not yet, ask again
                         410 {"state": "failed", message}: this host's own download failed during this serve
    GET /v1/files/<path> the bytes of a file the marker lists (Range: bytes=N- or N-M answers 206)

Only files listed in the completion marker model_fetch.py writes after every file's hash matched are served;
the fetching host checks each file's sha256 again against the plan it resolved from the endpoint.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .model_fetch import marker_matches, read_marker

TOKEN_ENV = "VLLM_RIG_PEER_TOKEN"
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Model:
    """What is served: the marker of DIR (re-read on each request: DIR may switch while this runs)."""

    def __init__(self, dest: Path, repo: str, revision: str, status_file: Path | None) -> None:
        self.dest, self.repo, self.revision, self.status_file = dest, repo, revision, status_file
        self.started = time.time()

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
        if self.status_file is None:
            return {}
        try:
            if self.status_file.stat().st_mtime < self.started:
                return {}
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
        found = (top / path).resolve()
        return found if found.is_relative_to(top) and found.is_file() else None


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "vllm-rig-model-serve"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._authorized():
            self._json(HTTPStatus.UNAUTHORIZED, {"state": "refused", "message": "wrong or missing token"})
            return
        path = urlsplit(self.path).path
        if path == "/v1/status":
            self._json(*self.server.model.status())
        elif path.startswith("/v1/files/"):
            self._send_file(unquote(path.removeprefix("/v1/files/")))
        else:
            self._json(HTTPStatus.NOT_FOUND, {"state": "unknown", "message": f"no such path {path}"})

    def _authorized(self) -> bool:
        sent = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return bool(sent) and hmac.compare_digest(sent.encode(), self.server.token.encode())

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
        wanted = RANGE.match(self.headers.get("Range", "").strip())
        if wanted:
            start = int(wanted.group(1))
            end = min(int(wanted.group(2)), size - 1) if wanted.group(2) else size - 1
            if start >= size or start > end:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        print(f"model_serve: {self.address_string()} {format % args}", file=sys.stderr, flush=True)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: Model, token: str) -> None:
        self.model, self.token = model, token
        super().__init__(address, Handler)


def bind_address(name: str) -> tuple[str, int]:
    """(address, family) to listen on: the address peers use; for a name, every address, because a box's
    own name often resolves to loopback on itself (Debian's 127.0.1.1) while the LAN resolves it rightly."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return "0.0.0.0", socket.AF_INET
    return str(address), socket.AF_INET6 if address.version == 6 else socket.AF_INET


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="model_serve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="the model directory (model_dir)")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--bind", required=True, help="the address the other rigs reach this one at")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--status-file", default=None, help="this host's own download status (model_fetch.py)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        print(f"model_serve: {TOKEN_ENV} is not set (at least 16 characters); refusing to serve", file=sys.stderr)
        return 1
    status_file = Path(args.status_file) if args.status_file else None
    model = Model(Path(args.dest).absolute(), args.repo, args.revision, status_file)
    try:
        address, family = bind_address(args.bind)
        Server.address_family = family
        server = Server((address, args.port), model, token)
    except OSError as err:
        print(f"model_serve: cannot listen on {args.bind}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"model_serve: serving {args.repo}@{args.revision} from {model.dest} on {address}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
