"""The fetching side of a model peer (vllm_rig/host/model_serve.py on another rig): wait until it holds the
commit the endpoint resolved, then download files from it with Range resume, then say it is done with it
(the peer refuses this host's token from then on). model_fetch.py checks every file's hash against its own
plan afterwards, exactly as for a download from the endpoint.

Anything that stops the peer from being used raises PeerUnused with the reason; model_fetch.py says it in one
line and fetches what is still missing from the endpoint.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import http.client
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

TOKEN_ENV = "VLLM_RIG_PEER_TOKEN"
PART_DIR = Path(".parts")  # inside model_fetch's .DIR.peer (files adopted into the cache, removed at the switch)
CHUNK = 1 << 20
TIMEOUT_S = 30.0
POLL_S = 2.0
REFUSED_GRACE_S = 15.0  # the peer's server starts in the same run, a moment before this fetch
RETRIES = 3  # per file, each resuming where the last stopped
WORKERS = 4
DONE_TIMEOUT_S = 5.0


class PeerUnused(Exception):
    """The reason the peer is not used (for the one line)."""


@dataclass(frozen=True)
class Want:
    path: str
    size: int


@dataclass(frozen=True)
class Peer:
    name: str
    url: str  # http://address:port
    token: str
    wait_s: float

    @classmethod
    def parse(cls, spec: str, wait_s: float) -> Peer:
        """`NAME=http://ADDRESS:PORT`, the token from the environment."""
        name, _, url = spec.partition("=")
        if not name or not url.startswith("http://"):
            raise ValueError(f"--peer {spec!r}: expected NAME=http://ADDRESS:PORT")
        return cls(name, url.rstrip("/"), os.environ.get(TOKEN_ENV, ""), wait_s)

    def _get(
        self, path: str, headers: dict[str, str] | None = None, method: str = "GET", timeout: float = TIMEOUT_S
    ) -> http.client.HTTPResponse:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
        conn.request(method, path, headers={"Authorization": f"Bearer {self.token}", **(headers or {})})
        return conn.getresponse()

    def done(self) -> None:
        """Tell the peer this host is done with it (it has what it takes from it, or gave up on it): the peer
        refuses this host's token from now on and stops once every follower said so. Best effort: a peer that
        is gone has nothing to stop."""
        if not self.token:
            return
        with contextlib.suppress(OSError, http.client.HTTPException):
            self._get("/v1/done", method="POST", timeout=DONE_TIMEOUT_S).read()

    def wait_ready(self, commit: str, tick: Callable[[str], None]) -> dict[str, Any]:
        """The peer's file list once it holds `commit`; waits while it is still fetching, up to wait_s."""
        if not self.token:
            raise PeerUnused(f"no token ({TOKEN_ENV} is not set)")
        started = time.monotonic()
        while True:
            try:
                response = self._get("/v1/status")
                body = json.loads(response.read() or b"{}")
            except (OSError, http.client.HTTPException, ValueError) as err:
                if time.monotonic() - started > min(REFUSED_GRACE_S, self.wait_s):
                    raise PeerUnused(f"not reachable at {self.url} ({type(err).__name__}: {err})") from None
                time.sleep(POLL_S)
                continue
            if not isinstance(body, dict):
                raise PeerUnused(f"its status answer is a JSON {type(body).__name__}, not an object")
            if response.status == 200:
                if body.get("commit") != commit:
                    raise PeerUnused(f"it holds commit {str(body.get('commit'))[:12]}, the endpoint says {commit[:12]}")
                return offered_files(body.get("files"))
            if response.status == 401:
                raise PeerUnused("it refused this run's token")
            if response.status != 503:
                raise PeerUnused(f"it answered HTTP {response.status}: {body.get('message') or body.get('state')}")
            if time.monotonic() - started > self.wait_s:
                raise PeerUnused(f"it did not hold the model within model_peer_wait_s={self.wait_s:g}")
            tick(f"waiting for model peer {self.name} ({body.get('phase') or 'starting'})")
            time.sleep(POLL_S)

    def download(self, staging: Path, files: Iterable[Want], tick: Callable[[], None]) -> None:
        """Every file into staging, in a few threads; the first failure stops the peer (PeerUnused)."""
        with cf.ThreadPoolExecutor(WORKERS) as pool:
            pending = {pool.submit(self._fetch_file, staging, f) for f in files}
            while pending:
                done, pending = cf.wait(pending, timeout=POLL_S, return_when=cf.FIRST_EXCEPTION)
                for future in done:
                    if future.exception() is not None:
                        for rest in pending:
                            rest.cancel()
                        raise future.exception()  # type: ignore[misc]
                tick()

    def _fetch_file(self, staging: Path, want: Want) -> None:
        part = staging / PART_DIR / f"{want.path}.part"
        part.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(RETRIES):
            try:
                if self._resume(part, want):
                    break
            except (OSError, http.client.HTTPException) as err:
                if attempt == RETRIES - 1:
                    raise PeerUnused(f"{want.path}: {type(err).__name__}: {err}") from None
                time.sleep(1.0)
        else:
            raise PeerUnused(f"{want.path}: the connection kept ending early")
        target = staging / want.path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, target)

    def _resume(self, part: Path, want: Want) -> bool:
        """One request from the part's current size; True once the part has the whole file."""
        have = part.stat().st_size if part.exists() else 0
        if have > want.size:
            part.unlink()
            have = 0
        if have == want.size:
            return True
        response = self._get(f"/v1/files/{quote(want.path)}", {"Range": f"bytes={have}-"})
        if response.status == 200:
            have = 0  # the whole file again: start over
        elif response.status != 206:
            raise PeerUnused(f"{want.path}: it answered HTTP {response.status}")
        # Bounded by the size the endpoint lists, whatever the peer says (a 206 with no length may never end):
        # at most the rest of the file is written, and one byte more means the peer is no use.
        left = want.size - have
        with part.open("r+b" if have else "wb") as out:
            out.seek(have)
            out.truncate()
            while left > 0 and (chunk := response.read(min(CHUNK, left))):
                out.write(chunk)
                left -= len(chunk)
        if left == 0 and response.read(1):
            response.close()
            raise PeerUnused(f"{want.path}: it sent more than the {want.size} bytes the endpoint lists")
        return part.stat().st_size == want.size


def offered_files(files: Any) -> dict[str, dict[str, Any]]:
    """The status answer's file list: an object of objects, or the peer is no use (never an AttributeError)."""
    if files is None:
        return {}
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise PeerUnused("its file list is not an object of file entries")
    return dict(files)


def part_bytes(staging: Path) -> int:
    """Bytes in the peer's partial files (for the progress line)."""
    top = staging / PART_DIR
    total = 0
    if top.is_dir():
        for part in top.rglob("*.part"):
            try:
                total += part.stat().st_size
            except OSError:
                continue
    return total
