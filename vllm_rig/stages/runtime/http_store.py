"""A runtime artifact store that several control machines share: a plain web server with uploads.

What it needs of the server, nginx's words for each (cited in tests/STANDIN_SOURCES.md, "Runtime artifact
store"): PUT to upload (`dav_methods PUT DELETE; create_full_put_path on;`, nginx writes the body to a temp
file and renames it, so a half upload is never visible), GET to read, DELETE to prune, and a JSON listing of
the store's directory for prune (`autoindex on; autoindex_format json;`), `client_max_body_size 0;` for
archives of some hundred MB. Basic auth (runtime_artifact_store_auth, or the control machine's ~/.netrc,
which requests reads when no auth is given); TLS verified against the system's CAs or
runtime_artifact_store_ca.

An artifact is whole when its manifest is there: put() uploads the archive first and the manifest last,
prune() deletes the manifest first. Every failure is a StoreError of one line naming the store and the
HTTP status; credentials never appear in it (the URL holds none: settings refuse userinfo).
"""

from __future__ import annotations

import email.utils
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime.store import StoreError

# Archives downloaded from an HTTP store, on the control machine (kept like the store: prune)
DEFAULT_CACHE = Path(__file__).resolve().parents[3] / ".cache" / "runtime-artifacts"
TIMEOUT = (10.0, 120.0)  # connect, and each read: a stalled server fails, a slow big upload does not
CHUNK = 1 << 20
FINGERPRINT = re.compile(r"^([0-9a-f]{64})\.json$")


def _reason(err: requests.RequestException) -> str:
    """The short cause of a transport failure ("Connection refused"), not urllib3's nested repr."""
    if isinstance(err, requests.exceptions.SSLError):
        return "TLS verification failed (runtime_artifact_store_ca names a CA bundle)"
    if isinstance(err, requests.Timeout):
        return f"no answer within {TIMEOUT[1]:.0f} s"
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(err))
    if found:
        return f"cannot connect ({found.group(1).strip()})"
    return f"cannot connect ({type(err).__name__})"


class HttpStore:
    def __init__(self, url: str, auth: str | None = None, ca: str | None = None, cache: Path = DEFAULT_CACHE):
        self.url = url
        self.cache = cache
        self.session = requests.Session()
        if auth:
            user, _, password = auth.partition(":")
            self.session.auth = (user, password)
        # passed with every request: a Session's own verify loses to REQUESTS_CA_BUNDLE (psf/requests#4726)
        self.verify: str | bool = ca or True

    def describe(self) -> str:
        return self.url

    def _request(self, method: str, name: str, ok: tuple[int, ...], **kwargs: Any) -> requests.Response | None:
        """One request; None for a 404, the response for a status in `ok`, StoreError for anything else."""
        what = name or "the listing"
        try:
            response = self.session.request(method, self.url + name, timeout=TIMEOUT, verify=self.verify, **kwargs)
        except requests.RequestException as err:
            raise StoreError(f"store {self.url}: {method} {what}: {_reason(err)}") from None
        if response.status_code in ok:
            return response
        response.close()
        if response.status_code == 404:
            return None
        hint = {401: " (runtime_artifact_store_auth is wrong or missing)", 413: " (raise client_max_body_size)"}
        status = f"HTTP {response.status_code} {response.reason}{hint.get(response.status_code, '')}"
        raise StoreError(f"store {self.url}: {method} {what}: {status}")

    def manifest(self, fingerprint: str) -> bytes | None:
        response = self._request("GET", runtime_artifact.manifest_name(fingerprint), (200,))
        return None if response is None else response.content

    def archive(self, fingerprint: str) -> Path | None:
        try:
            return self._archive(fingerprint)
        except OSError as err:  # the cache on this machine: full, or not writable
            raise StoreError(f"store {self.url}: its cache {self.cache}: {err.strerror or err}") from None

    def _archive(self, fingerprint: str) -> Path | None:
        """The archive in the control machine's cache, downloaded (or resumed) when the cache lacks the bytes
        the manifest names; its size checked here, its sha256 by the host that installs it (and here after a
        resume, which could join two uploads)."""
        raw = self.manifest(fingerprint)
        if raw is None:
            return None
        try:
            want = json.loads(raw)
            size, sha = int(want["archive_bytes"]), str(want["archive_sha256"])
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"store {self.url}: the manifest of {fingerprint[:16]} is not a manifest") from None
        name = runtime_artifact.archive_name(fingerprint)
        path = self._cache() / name
        if path.is_file() and path.stat().st_size == size and runtime_artifact.file_sha256(path) == sha:
            return path
        part = path.with_name(name + ".part")
        resumed = part.is_file()
        if not self._download(name, part):
            return None
        if resumed and part.stat().st_size == size and runtime_artifact.file_sha256(part) != sha:
            part.unlink()  # the earlier part was of another upload under this name: once more, whole
            if not self._download(name, part):
                return None
        if part.stat().st_size != size:
            got = part.stat().st_size
            part.unlink()
            raise StoreError(f"store {self.url}: {name} is {got} bytes, its manifest says {size}: partial")
        os.replace(part, path)
        return path

    def _cache(self) -> Path:
        self.cache.mkdir(parents=True, exist_ok=True)
        return self.cache

    def _download(self, name: str, part: Path) -> bool:
        """Stream into `part`, resuming an earlier part with a Range request; False when the server has none."""
        have = part.stat().st_size if part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        response = self._request("GET", name, (200, 206, 416), headers=headers, stream=True)
        if response is None:
            part.unlink(missing_ok=True)
            return False
        with response:
            if response.status_code == 416:  # the part is already as long as the file (or longer): start over
                part.unlink()
                return self._download(name, part)
            mode = "ab" if response.status_code == 206 else "wb"
            try:
                with part.open(mode) as f:
                    for block in response.iter_content(CHUNK):
                        f.write(block)
            except requests.RequestException as err:
                raise StoreError(f"store {self.url}: GET {name}: {_reason(err)} (the next run resumes)") from None
        return True

    def scratch(self) -> Path:
        """Where an artifact fetched from a host waits for its upload: beside the download cache."""
        path = self.cache / "incoming"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def put(self, fingerprint: str, archive: Path, manifest: Path) -> None:
        for path in (archive, manifest):  # the manifest last: once it is there, the artifact is whole
            try:
                with path.open("rb") as body:
                    response = self._request("PUT", path.name, (200, 201, 204), data=body)
            except OSError as err:
                raise StoreError(f"store {self.url}: PUT {path.name}: {err.strerror or err}") from None
            if response is None:
                raise StoreError(f"store {self.url}: PUT {path.name}: HTTP 404 (is PUT allowed there?)")

    def listing(self) -> list[dict[str, Any]]:
        """The store's directory as nginx's autoindex_format json gives it; empty before the first upload."""
        response = self._request("GET", "", (200,))
        if response is None:
            return []
        try:
            entries = response.json()
        except ValueError:
            raise StoreError(
                f"store {self.url}: its listing is not JSON (the server needs autoindex on; autoindex_format json)"
            ) from None
        if not isinstance(entries, list):
            raise StoreError(f"store {self.url}: its listing is JSON but not a list of entries")
        return [e for e in entries if isinstance(e, dict) and e.get("type") == "file"]

    def prune(self, keep: int) -> list[str]:
        """Keep the `keep` newest artifacts (by their manifest's time in the listing); delete the others'
        manifest, then archive. The cache on this machine keeps the same ones."""
        removed = []
        for fp in list(_by_age(self.listing()))[keep:]:
            for name in (runtime_artifact.manifest_name(fp), runtime_artifact.archive_name(fp)):
                self._request("DELETE", name, (200, 204))
            removed.append(fp)
        if self.cache.is_dir():
            for fp in removed:
                (self.cache / runtime_artifact.archive_name(fp)).unlink(missing_ok=True)
        return removed


def _by_age(entries: list[dict[str, Any]]) -> Iterator[str]:
    """Fingerprints with a manifest, newest first (the name breaks a tie: mtime has whole seconds)."""
    dated = []
    for entry in entries:
        found = FINGERPRINT.match(str(entry.get("name")))
        if not found:
            continue
        try:
            when = email.utils.parsedate_to_datetime(str(entry.get("mtime"))).timestamp()
        except (TypeError, ValueError):
            when = 0.0  # no readable time: the oldest
        dated.append((when, found.group(1)))
    for _when, fp in sorted(dated, reverse=True):
        yield fp
