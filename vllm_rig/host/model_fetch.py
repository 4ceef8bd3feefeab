#!/usr/bin/env python3
"""Fetch a model snapshot with huggingface_hub in this process, check every file with its checksum code, then
switch to it.

Runs on the host with the tools venv's python (huggingface_hub 2.4.0, pinned by the model stage). The deploy
starts `fetch` as a transient systemd unit (so an SSH drop does not kill it) and reads its status file for the
progress line; `check` is instant.

    model_fetch.py fetch  --repo R --revision REV --dest DIR [--endpoint URL] [--disable-xet]
                          --status-file F [--max-workers N] [--verify-endpoint URL]
                          [--peer NAME=http://ADDRESS:PORT [--peer-wait-s S]]
    model_fetch.py check  --repo R --revision REV --dest DIR

Exit codes: 0 complete and verified; 1 usage or unexpected error; 2 the endpoint could not be reached, or the
repo or revision is unknown there, or access was denied (checked before anything is written); 3 incomplete
(a re-run continues); 4 corrupt (a file failed its size or hash check again after one re-fetch; named);
5 not enough free disk space; 6 another fetch of the same DIR is running.

What the library does here: the listing (HfApi.model_info, list_repo_tree), the download (snapshot_download
at the resolved commit into its own cache layout, cache_dir=hf-cache beside DIR), the checksum test (its
verify_maps, what `hf cache verify` runs: sha256 for LFS files, the git blob sha1 for the others) and the
removal of a revision (scan_cache_dir().delete_revisions(), which keeps the blobs another revision still uses).
What stays hand-written, and why (huggingface_hub 2.4.0's source):
  - the preflight's exit codes: snapshot_download returns what the cache holds when the endpoint is down, 5xx,
    or says 404 without an error code, so its return proves nothing; the revision and the tree are resolved
    first and every file is checked after;
  - the check itself: downloads test the size only (file_download.py, "Consistency check failed"), so a
    flipped byte passes until verify_maps is run against the listing this run resolved (verify_repo_checksums
    would list the tree a second time, and a mirror could answer that one with other hashes);
  - the leftovers of a killed run: each process writes `blobs/<etag>.<uuid8>.incomplete`
    (_download_to_tmp_and_move) and no later process reuses it (so a cut file starts over; whole files are
    kept), so they are deleted before a run;
  - the marker and the one switch below: the library fills a snapshot file by file, in place, so the service
    is pointed at it only once every file passed the check;
  - the adoption of files already on the box (the layout before the cache, a hand-made download, a model
    peer's files): the library only ever downloads a blob; a hard link named as it names blobs (the file's
    ETag: the LFS sha256, or the git blob sha1) is a blob it then uses without downloading.

Layout beside DIR (the service's model_dir):
  DIR                     a symlink to hf-cache/models--<owner>--<name>/snapshots/<commit> (what vLLM reads),
                          replaced in one rename(2) once that snapshot is verified: the service sees the old
                          model or the new one, never a mix. A real directory there (a hand-made download) has
                          its files hard-linked into the cache, then is moved aside to DIR.replaced-<time>.
  hf-cache/               huggingface_hub's cache, shared by the model directories of this parent. The snapshot
                          DIR left is removed after a switch unless another model directory points to it.
  DIR.rev-*, DIR.partial-*  the layout before the cache: adopted (hard links), deleted after the switch.
  .DIR.peer/, .DIR.fetch.lock  a model peer's files before adoption, the lock held while a fetch runs.

With --peer, the files come from another rig's model_serve.py instead (model_peer.py: it waits while that rig
still downloads, resumes by Range), and are checked against this host's own plan from the endpoint just the
same; a peer that is unreachable, refuses or serves a bad file is named in one line and the endpoint serves
what is still missing. The marker (in the snapshot) records how many files came from the peer.

A marker for the same repo and revision in DIR's snapshot in the cache makes `fetch` and `check` instant and
offline (a branch such as "main" is thus pinned to the commit first fetched). The cache's files end up a+rX
and go-w: the service reads them and cannot change them.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from .model_peer import TOKEN_ENV, Peer, PeerUnused, Want, part_bytes
from .units import human

if TYPE_CHECKING:
    from huggingface_hub.hf_api import RepoFile

T = TypeVar("T")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_UNREACHABLE = 2
EXIT_INCOMPLETE = 3
EXIT_CORRUPT = 4
EXIT_NO_SPACE = 5
EXIT_BUSY = 6

MARKER = ".vllm-rig-complete.json"
MARKER_FORMAT = 1
HASH_WORKERS = 4
PLAIN_FILE_MAX = 64 << 20  # a file listed without an LFS sha256 (the Hub's LFS threshold is 10 MB)
STATUS_INTERVAL_S = 2.0
DISK_HEADROOM = 256 << 20
PREFLIGHT_RETRY_DELAYS_S = (1.0, 2.0)  # a mirror that blips for a second is not "down"
SHA40 = re.compile(r"^[0-9a-f]{40}$")
SHA64 = re.compile(r"^[0-9a-f]{64}$")
LOOPBACK = ("127.0.0.1", "localhost")
DEFAULT_ENDPOINT = "https://huggingface.co"


class FetchError(Exception):
    """A failure with its exit code and the one line that explains it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---- what the endpoint says ---------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # lfs.oid; None for a plain git file
    git_oid: str  # the git blob sha1


@dataclass(frozen=True)
class Plan:
    repo: str
    revision: str
    commit: str
    endpoint: str
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def short(self) -> str:
        return self.commit[:12]


def endpoint_host(endpoint: str) -> str:
    """scheme://host[:port] only: no path, and never credentials someone put in the URL."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"


# ---- environment: token, endpoint, proxies ------------------------------------------------------


def _no_proxy(value: str) -> str:
    items = [i.strip() for i in value.split(",") if i.strip()]
    return ",".join(items + [h for h in LOOPBACK if h not in items])


def hub_env(base: Mapping[str, str], endpoint: str | None, disable_xet: bool) -> dict[str, str]:
    """The environment for huggingface_hub in this process (set before it is imported: it reads it once).

    The token travels only as HF_TOKEN in the environment (the unit reads it from a 0600 EnvironmentFile);
    without one, implicit tokens (a token file under HF_HOME) are switched off so nothing is sent.
    """
    env = dict(base)
    if endpoint:
        env["HF_ENDPOINT"] = endpoint.rstrip("/")
    if env.get("HF_TOKEN"):
        env.pop("HF_HUB_DISABLE_IMPLICIT_TOKEN", None)  # it would also stop HF_TOKEN from being sent
    else:
        env.pop("HF_TOKEN", None)
        env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    if disable_xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    env.pop("HF_HUB_OFFLINE", None)
    env.update(HF_HUB_DISABLE_UPDATE_CHECK="1", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    # httpx honours HTTP(S)_PROXY even for loopback; a mirror on this box must be reached directly.
    env["NO_PROXY"] = env["no_proxy"] = _no_proxy(env.get("NO_PROXY") or env.get("no_proxy") or "")
    return env


def apply_env(env: Mapping[str, str]) -> None:
    """Make this process's environment exactly `env` (before huggingface_hub is imported: it reads it once)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    os.environ.update(env)


def redact(text: str) -> str:
    """Never let a token (the HF one, the peers') reach the journal, whatever a library put in a message."""
    for name in ("HF_TOKEN", TOKEN_ENV):
        token = os.environ.get(name)
        text = text.replace(token, "<redacted>") if token else text
    return text


def say(message: str, error: bool = False) -> None:
    print(redact(f"model_fetch: {message}"), file=sys.stderr if error else sys.stdout, flush=True)


# ---- preflight: resolve the revision and list the tree ------------------------------------------


def _describe_http_error(exc: Exception, plan_name: str, endpoint: str) -> str:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint_host(endpoint)
    if isinstance(exc, GatedRepoError):
        return f"{plan_name}: access denied at {where} (a gated repo: set hf_token to an account with access)"
    if isinstance(exc, RevisionNotFoundError):
        return f"{plan_name}: no such revision at {where}"
    if isinstance(exc, RepositoryNotFoundError):
        return f"{plan_name}: repository not found at {where} (or private: set hf_token)"
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status == 404:
            return f"{plan_name}: not found at {where} (HTTP 404)"
        if status in (401, 403):
            return f"{plan_name}: access denied at {where} (HTTP {status}: check hf_token)"
        return f"{plan_name}: {where} answered HTTP {status}"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{plan_name}: could not reach {where} ({type(exc).__name__}: {first_line})"


def _retryable(exc: Exception) -> bool:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError):
        return exc.response is None or exc.response.status_code >= 500
    return not isinstance(exc, ValueError)  # transport errors (refused, reset, timeout); not a bad repo id


def _safe_repo_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _remote_files(entries: Iterable[Any]) -> tuple[RemoteFile, ...]:
    from huggingface_hub.hf_api import RepoFile

    files = []
    for entry in entries:
        if not isinstance(entry, RepoFile):
            continue  # folders
        sha256 = entry.lfs.sha256 if entry.lfs is not None else None
        files.append(RemoteFile(entry.path, int(entry.size), sha256, entry.blob_id))
    return tuple(sorted(files, key=lambda f: f.path))


def resolve(repo: str, revision: str, endpoint: str, send_token: bool = True) -> Plan:
    """The commit and the file list of repo@revision, or FetchError(2) naming the repo and the endpoint.
    `send_token`: False for a second endpoint, which is not the one the token is for."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=(os.environ.get("HF_TOKEN") or False) if send_token else False)
    name = f"{repo}@{revision}"
    for delay in (*PREFLIGHT_RETRY_DELAYS_S, None):
        try:
            commit = api.model_info(repo, revision=revision).sha
            files = _remote_files(api.list_repo_tree(repo, revision=commit, recursive=True))
            break
        except Exception as exc:  # every failure here is "cannot fetch"; classify it for the one line
            if delay is None or not _retryable(exc):
                raise FetchError(EXIT_UNREACHABLE, redact(_describe_http_error(exc, name, endpoint))) from None
            time.sleep(delay)
    if not commit or not SHA40.match(commit):
        raise FetchError(EXIT_UNREACHABLE, f"{name}: {endpoint_host(endpoint)} gave no commit sha")
    if not files:
        raise FetchError(EXIT_UNREACHABLE, f"{name}: {endpoint_host(endpoint)} lists no files at {commit[:12]}")
    unsafe = [f.path for f in files if not _safe_repo_path(f.path)]
    if unsafe:
        raise FetchError(EXIT_UNREACHABLE, f"{name}: refusing unsafe path {unsafe[0]!r} from the endpoint")
    # The hashes name the cache's blobs (adopt, forget_file): hex of their length, or a name could climb out.
    odd = [f.path for f in files if not (SHA40.match(f.git_oid) and (f.sha256 is None or SHA64.match(f.sha256)))]
    if odd:
        raise FetchError(EXIT_UNREACHABLE, f"{name}: refusing {odd[0]!r}: the endpoint lists a hash that is not hex")
    # verify_maps reads a file without an LFS sha256 whole into memory for its git sha1; the Hub stores every
    # file over 10 MB in LFS, so a bigger one listed without is an endpoint's lie, refused before any download.
    huge = [f for f in files if f.sha256 is None and f.size > PLAIN_FILE_MAX]
    if huge:
        raise FetchError(
            EXIT_UNREACHABLE,
            f"{name}: refusing {huge[0].path!r}: {human(huge[0].size)} listed without an LFS sha256 "
            f"(at most {human(PLAIN_FILE_MAX)} is allowed for a plain git file)",
        )
    return Plan(repo, revision, commit, endpoint, files)


# ---- verification ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    path: str
    ok: bool
    problem: str = ""  # "missing", "size", "hash"


def repo_file(remote: RemoteFile) -> RepoFile:
    """The library's record of a listed file, built from this run's plan (what verify_maps compares with)."""
    from huggingface_hub.hf_api import RepoFile

    lfs = {"oid": remote.sha256, "size": remote.size, "pointerSize": 0} if remote.sha256 else None
    return RepoFile(path=remote.path, size=remote.size, oid=remote.git_oid, lfs=lfs)


def verify_file(top: Path, remote: RemoteFile) -> Verdict:
    """The size by stat, then the library's checksum test: sha256 for LFS files, the git blob sha1 otherwise."""
    from huggingface_hub.utils._verification import verify_maps  # what HfApi.verify_repo_checksums runs

    path = top / remote.path
    if not path.is_file():
        return Verdict(remote.path, False, problem="missing")
    if path.stat().st_size != remote.size:
        return Verdict(remote.path, False, problem="size")
    found = verify_maps(
        remote_by_path={remote.path: repo_file(remote)},
        local_by_path={remote.path: path},
        revision="",
        verified_path=top,
    )
    ok = not found.mismatches and not found.missing_paths
    return Verdict(remote.path, ok, "" if ok else "hash")


def verify_all(top: Path, files: Iterable[RemoteFile], tick: Callable[[], None]) -> dict[str, Verdict]:
    """Verify files in a few threads (hashlib releases the GIL; verify_maps hashes one file at a time), ticking
    the status while they run."""
    with cf.ThreadPoolExecutor(HASH_WORKERS) as pool:
        pending = {pool.submit(verify_file, top, f) for f in files}
        results: dict[str, Verdict] = {}
        while pending:
            done, pending = cf.wait(pending, timeout=STATUS_INTERVAL_S)
            for future in done:
                verdict = future.result()
                results[verdict.path] = verdict
            tick()
    return results


# ---- the cache beside DIR -------------------------------------------------------------------------

CACHE = "hf-cache"


@dataclass(frozen=True)
class Places:
    dest: Path

    @property
    def parent(self) -> Path:
        return self.dest.parent

    @property
    def cache(self) -> Path:
        return self.parent / CACHE

    def snapshot(self, plan: Plan) -> Path:
        """Where snapshot_download puts repo@commit: cache/models--<owner>--<name>/snapshots/<commit>."""
        return self.cache / f"models--{plan.repo.replace('/', '--')}" / "snapshots" / plan.commit

    @property
    def peer_dir(self) -> Path:
        return self.parent / f".{self.dest.name}.peer"

    @property
    def lock(self) -> Path:
        return self.parent / f".{self.dest.name}.fetch.lock"

    def old_layout(self) -> list[Path]:
        """The snapshots and staging of the layout before the cache (DIR.rev-*, DIR.partial-*)."""
        found = [*self.parent.glob(f"{self.dest.name}.rev-*"), *self.parent.glob(f"{self.dest.name}.partial-*")]
        return sorted(p for p in found if p.is_dir() and not p.is_symlink())

    def in_cache(self) -> bool:
        """DIR points into the cache (not at the layout before it, nor a hand-made directory)."""
        return self.dest.is_symlink() and self.dest.resolve().is_relative_to(self.cache.resolve())


def blob_of(snapshot: Path, remote: RemoteFile) -> Path:
    """The library names a blob by the file's ETag: the LFS sha256, else the git blob sha1."""
    return snapshot.parent.parent / "blobs" / (remote.sha256 or remote.git_oid)


def clean_client_leftovers(snapshot: Path) -> int:
    """Delete what a killed run leaves: `<etag>.<uuid8>.incomplete` parts (each process names its own, so no
    later one reuses them: file_download._download_to_tmp_and_move) and the tmp_ files of its umask probe."""
    removed = 0
    blobs = snapshot.parent.parent / "blobs"
    for leftover in [*blobs.glob("*.incomplete"), *blobs.glob("tmp_*")] if blobs.is_dir() else []:
        if leftover.is_file():
            leftover.unlink()
            removed += 1
    return removed


def forget_file(snapshot: Path, remote: RemoteFile) -> None:
    """Remove a bad file so it is fetched again: the blob its link leads to too (the library would link a blob
    it has again); a missing file takes no blob, so a good one another revision uses stays."""
    pointer = snapshot / remote.path
    if pointer.is_symlink() and pointer.resolve().parent == (snapshot.parent.parent / "blobs").resolve():
        pointer.resolve().unlink(missing_ok=True)
    pointer.unlink(missing_ok=True)


def adopt(snapshot: Path, remote: RemoteFile, source: Path) -> bool:
    """Put a file already on this box into the cache as the library would: a hard link at blobs/<etag> (never
    a copy: on another filesystem it is downloaded instead) and the snapshot's relative symlink to it. Only
    the size is looked at here: every file is hashed before use."""
    pointer, blob = snapshot / remote.path, blob_of(snapshot, remote)
    if pointer.exists() or not source.is_file() or source.stat().st_size != remote.size:
        return False
    blob.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, blob)
    except FileExistsError:
        pass  # the blob is there already (another revision has it); the check judges it
    except OSError:
        return False
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.unlink(missing_ok=True)  # a dangling link to a blob that went
    pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    return True


def adopt_from(snapshot: Path, sources: Iterable[Path], files: Iterable[RemoteFile]) -> int:
    """Adopt each missing file from the first of `sources` that holds it at the right size."""
    return sum(any(adopt(snapshot, f, source / f.path) for source in sources) for f in files)


def bytes_on_disk(snapshot: Path, files: Iterable[RemoteFile], peer_dir: Path) -> tuple[int, int]:
    """(bytes, whole files) of the snapshot, counting the library's and the peer's in-progress parts."""
    done = whole = 0
    for remote in files:
        try:
            size = (snapshot / remote.path).stat().st_size
        except OSError:
            continue
        done += min(size, remote.size)
        whole += size == remote.size
    blobs = snapshot.parent.parent / "blobs"
    for part in blobs.glob("*.incomplete") if blobs.is_dir() else []:
        with contextlib.suppress(OSError):  # finished and moved while we looked
            done += part.stat().st_size
    return done + part_bytes(peer_dir), whole


# ---- status file ----------------------------------------------------------------------------------


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.chmod(tmp, 0o644)
    tmp.replace(path)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Status:
    """The status file the deploy reads for its progress line; rewritten at most every couple of seconds."""

    def __init__(self, path: Path, repo: str, revision: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "repo": repo,
            "revision": revision,
            "commit": None,
            "phase": "resolving",
            "bytes_done": 0,
            "bytes_total": None,
            "files_done": 0,
            "files_total": None,
            "pid": os.getpid(),
            "started_at": now_iso(),
            "updated_at": now_iso(),
            "message": "",
            "exit_code": None,
        }
        self.snapshot: Path | None = None
        self.peer_dir = Path()
        self.files: tuple[RemoteFile, ...] = ()
        self._last = 0.0

    def plan(self, plan: Plan, places: Places) -> None:
        self.snapshot, self.peer_dir, self.files = places.snapshot(plan), places.peer_dir, plan.files
        self.data.update(commit=plan.commit, bytes_total=plan.total_bytes, files_total=len(plan.files))

    def update(self, phase: str | None = None, message: str | None = None, force: bool = True) -> None:
        if not force and time.monotonic() - self._last < STATUS_INTERVAL_S:
            return
        if phase is not None:
            self.data["phase"] = phase
        if message is not None:
            self.data["message"] = redact(message)
        if self.snapshot is not None:
            done, whole = bytes_on_disk(self.snapshot, self.files, self.peer_dir)
            self.data.update(bytes_done=min(done, self.data["bytes_total"] or done), files_done=whole)
        self.data["updated_at"] = now_iso()
        self._last = time.monotonic()
        write_json_atomic(self.path, self.data)

    def already_complete(self, marker: Mapping[str, Any]) -> None:
        total = marker.get("total_bytes")
        files = len(marker.get("files") or {})
        self.data.update(commit=marker.get("commit"), bytes_done=total, bytes_total=total)
        self.data.update(files_done=files, files_total=files)
        self.finish(EXIT_OK, "already complete", "done")

    def tick(self) -> None:
        self.update(force=False)

    def finish(self, code: int, message: str, phase: str | None = None) -> None:
        self.data["exit_code"] = code
        self.update(phase or ("done" if code == EXIT_OK else "failed"), message)


def status_line(data: Mapping[str, Any]) -> str:
    total, done = data.get("bytes_total"), data.get("bytes_done") or 0
    name = f"{data.get('repo')}@{(data.get('commit') or '')[:12] or data.get('revision')}"
    line = f"{data.get('phase')}: {name}"
    if total:
        line += f" {human(done)} of {human(total)} ({100 * done / total:.0f}%)"
        line += f", {data.get('files_done')}/{data.get('files_total')} files"
    if data.get("message"):
        line += f" - {data['message']}"
    return line


# ---- the completion marker ------------------------------------------------------------------------


def read_marker(top: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((top / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == MARKER_FORMAT else None


def marker_matches(marker: Mapping[str, Any] | None, repo: str, revision: str) -> bool:
    """Same repo, and the revision asked for is the one recorded (by name, or it is the commit itself)."""
    if not marker or marker.get("repo") != repo:
        return False
    return revision in (marker.get("revision"), marker.get("commit"))


def marker_problems(top: Path, marker: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(missing, wrong size) files listed in the marker, by stat alone: instant on 29 GB."""
    missing, wrong = [], []
    for path, meta in (marker.get("files") or {}).items():
        try:
            size = (top / path).stat().st_size
        except OSError:
            missing.append(path)
            continue
        if size != meta.get("size"):
            wrong.append(path)
    return missing, wrong


def fetched_with(client: str, files: int, peer: PeerUse | None) -> str:
    if peer is None or not peer.files:
        return client
    came = f"model peer {peer.name}, every file's hash checked against the endpoint's list"
    return came if peer.files == files else f"{came} ({peer.files} of {files} files); the rest by {client}"


def make_marker(plan: Plan, peer: PeerUse | None = None) -> dict[str, Any]:
    from huggingface_hub import __version__ as hub_version

    return {
        "format": MARKER_FORMAT,
        "repo": plan.repo,
        "revision": plan.revision,
        "commit": plan.commit,
        "endpoint": endpoint_host(plan.endpoint),
        "completed_at": now_iso(),
        "fetched_with": fetched_with(f"huggingface_hub {hub_version}", len(plan.files), peer),
        "from_peer": {"name": peer.name, "files": peer.files} if peer and peer.files else None,
        "total_bytes": plan.total_bytes,
        "files": {f.path: {"size": f.size, "sha256": f.sha256, "git_oid": f.git_oid} for f in plan.files},
    }


# ---- ownership and the switch ---------------------------------------------------------------------


def lock_down(top: Path) -> None:
    """a+rX, go-w: the service reads every file and can change none."""
    for path in [top, *top.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        read = 0o555 if path.is_dir() or mode & 0o111 else 0o444
        os.chmod(path, (mode | read) & ~0o022 & 0o7777)


def switch_to(places: Places, snapshot: Path) -> Path | None:
    """Point DIR at `snapshot` in one rename; return what DIR pointed to before (None if nothing)."""
    dest = places.dest
    previous: Path | None = None
    if dest.is_symlink():
        previous = (dest.parent / os.readlink(dest)).resolve()
    elif dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()  # an empty placeholder someone made: nothing to keep
    elif dest.exists():
        aside = dest.with_name(f"{dest.name}.replaced-{time.strftime('%Y%m%d%H%M%S')}")
        dest.rename(aside)  # a hand-made directory: kept, never deleted by this script
        say(f"moved the existing directory {dest} aside to {aside.name} (kept; remove it to free space)")
    link = dest.with_name(f".{dest.name}.link-{os.getpid()}")
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(snapshot, dest.parent))  # relative: the tree can be moved or mounted elsewhere
    link.replace(dest)
    return previous


def pointed_at(parent: Path) -> set[Path]:
    """What the symlinks in `parent` (this parent's model directories) point to."""
    return {p.resolve() for p in parent.iterdir() if p.is_symlink()}


def delete_snapshot(snapshot: Path) -> int:
    """Remove a snapshot of the cache through the library (it keeps the blobs another revision still uses),
    unless a model directory beside the cache still points to it. Returns the bytes freed."""
    if snapshot.parent.name != "snapshots" or snapshot in pointed_at(snapshot.parents[3]):
        return 0
    from huggingface_hub import scan_cache_dir

    strategy = scan_cache_dir(snapshot.parents[2]).delete_revisions(snapshot.name)
    strategy.execute()
    return strategy.expected_freed_size


def drop_previous(places: Places, previous: Path | None) -> None:
    """After a switch: the snapshot DIR left, and the layout before the cache (its files adopted)."""
    if previous is not None:
        delete_snapshot(previous)
    held = pointed_at(places.parent)
    for old in places.old_layout():
        if old not in held:
            shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(places.peer_dir, ignore_errors=True)


# ---- the download ----------------------------------------------------------------------------------


def while_ticking(work: Callable[[], T], tick: Callable[[], None]) -> T:
    """Run `work` in a thread; this (the main) thread ticks the status and takes SIGTERM meanwhile."""
    pool = cf.ThreadPoolExecutor(1, thread_name_prefix="download")
    future = pool.submit(work)
    pool.shutdown(wait=False)
    while True:
        try:
            return future.result(timeout=STATUS_INTERVAL_S)
        except cf.TimeoutError:
            tick()


def download(plan: Plan, cache: Path, paths: list[str], max_workers: int, status: Status) -> str:
    """snapshot_download of exactly these files at the resolved commit (no branch can move under us) into the
    cache. Returns "" or the library's error in one line; what arrived is judged by the check, not by this."""
    from huggingface_hub import snapshot_download

    patterns = [re.sub(r"([*?\[])", r"[\1]", p) for p in paths]  # names, not globs (fnmatch), to the allow-list

    def work() -> object:
        return snapshot_download(
            plan.repo,
            revision=plan.commit,
            cache_dir=cache,
            allow_patterns=patterns,
            endpoint=plan.endpoint,
            token=os.environ.get("HF_TOKEN") or False,
            max_workers=max_workers,
        )

    try:
        while_ticking(work, status.tick)
    except Exception as exc:  # the library's any failure: the check below says which files are missing
        return redact(f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}")
    return ""


def on_sigterm(signum: int, frame: object) -> None:
    """systemctl stop ends the run through the same cleanup as an error (SystemExit)."""
    sys.exit(128 + signum)


# ---- fetch ----------------------------------------------------------------------------------------


def refuse_if_busy(places: Places) -> None:
    """Exit 6 without writing anything when a fetch of DIR holds the lock."""
    try:
        fd = os.open(places.lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise FetchError(EXIT_BUSY, f"another fetch of {places.dest} is running (lock {places.lock})") from None
    finally:
        os.close(fd)


def take_lock(places: Places) -> int:
    places.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(places.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FetchError(EXIT_BUSY, f"another fetch of {places.dest} is running (lock {places.lock})") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def check_space(places: Places, plan: Plan) -> None:
    have, _ = bytes_on_disk(places.snapshot(plan), plan.files, places.peer_dir)
    need = max(0, plan.total_bytes - have) + DISK_HEADROOM
    free = shutil.disk_usage(places.parent).free
    if free < need:
        raise FetchError(
            EXIT_NO_SPACE,
            f"{plan.repo}@{plan.short}: needs {human(need)} more in {places.parent}, {human(free)} free",
        )


def prepare_snapshot(places: Places, plan: Plan, status: Status) -> Path:
    """The commit's snapshot in the cache: leftovers of a killed client removed, files already on this box
    (the layout before the cache, a hand-made directory at DIR) adopted."""
    snapshot = places.snapshot(plan)
    snapshot.mkdir(parents=True, exist_ok=True)
    status.plan(plan, places)
    status.update("preparing")
    removed = clean_client_leftovers(snapshot)
    if removed:
        say(f"removed {removed} partial file(s) a killed download left behind")
    live = places.dest.resolve() if places.dest.exists() and not places.in_cache() else None
    adopted = adopt_from(snapshot, [p for p in [live, *places.old_layout()] if p is not None], plan.files)
    if adopted:
        say(f"adopting {adopted} file(s) of the right size already on this box into the cache (hashed before use)")
    return snapshot


@dataclass
class PeerUse:
    """A model peer to fetch from, and how many files came from it (for the marker and the last line)."""

    peer: Peer
    files: int = 0

    @property
    def name(self) -> str:
        return self.peer.name

    def note(self) -> str:
        return f"{self.files} from model peer {self.name}" if self.files else ""


def peer_unused(use: PeerUse, plan: Plan, why: str, status: Status) -> None:
    """The one line that says the peer was not (wholly) used, and where the rest comes from; the status file
    keeps it for the deploy, which prints it once."""
    line = f"model peer {use.name} not used: {why}; fetching from {endpoint_host(plan.endpoint)} instead"
    say(line)
    status.data["peer_unused"] = redact(line)


def from_peer(use: PeerUse, plan: Plan, places: Places, todo: list[RemoteFile], status: Status) -> dict[str, Verdict]:
    """Download `todo` from the peer (into .DIR.peer, then adopted into the cache), then check each file against
    the endpoint's plan as any download is. Returns the verdicts of the files that passed; the rest is the
    endpoint's to fetch."""
    status.update("waiting for peer", f"model peer {use.name}")
    try:
        offered = use.peer.wait_ready(plan.commit, lambda line: status.update(message=line, force=False))
        lacking = [f.path for f in todo if (offered.get(f.path) or {}).get("size") != f.size]
        if lacking:
            raise PeerUnused(f"it does not list {lacking[0]} at the size the endpoint lists")
        status.update("downloading", f"from model peer {use.name}")
        use.peer.download(places.peer_dir, [Want(f.path, f.size) for f in todo], status.tick)
        why = ""
    except PeerUnused as err:
        why = str(err)
    use.peer.done()  # nothing more is asked of it: its server stops once every follower said so
    snapshot = places.snapshot(plan)
    adopt_from(snapshot, [places.peer_dir], todo)
    status.update("verifying")
    verdicts = verify_all(snapshot, [f for f in todo if (snapshot / f.path).exists()], status.tick)
    bad = [v for v in verdicts.values() if not v.ok]
    by_path = {f.path: f for f in todo}
    for verdict in bad:
        forget_file(snapshot, by_path[verdict.path])
    if bad and not why:
        why = f"{len(bad)} file(s) failed the check against the endpoint's list, e.g. {bad[0].path} ({bad[0].problem})"
    if why:
        peer_unused(use, plan, why, status)
    good = {path: v for path, v in verdicts.items() if v.ok}
    use.files = len(good)
    return good


def download_and_verify(
    plan: Plan, places: Places, status: Status, workers: int, peer: PeerUse | None = None
) -> tuple[dict[str, Verdict], str]:
    """Verify what is there, take the rest from the peer if there is one, download what is still missing, verify
    it; one more round for what failed. Returns the verdicts and the library's last error ("" if none)."""
    snapshot = places.snapshot(plan)
    status.update("verifying")
    verdicts = verify_all(snapshot, [f for f in plan.files if (snapshot / f.path).exists()], status.tick)
    todo = [f for f in plan.files if not (f.path in verdicts and verdicts[f.path].ok)]
    for remote in todo:
        forget_file(snapshot, remote)
    if peer is not None and todo:
        verdicts.update(from_peer(peer, plan, places, todo, status))
    elif peer is not None:
        peer.peer.done()  # everything is here already: nothing to ask of it
    error = ""
    for attempt in (1, 2):
        todo = [f for f in plan.files if not (f.path in verdicts and verdicts[f.path].ok)]
        if not todo:
            break
        for remote in todo:
            forget_file(snapshot, remote)
        if attempt == 2:
            say(f"fetching {len(todo)} file(s) again: {', '.join(f.path for f in todo)[:300]}")
        status.update("downloading" if attempt == 1 else "refetching")
        error = download(plan, places.cache, [f.path for f in todo], workers, status)
        status.update("verifying")
        verdicts.update(verify_all(snapshot, todo, status.tick))
        bad = [v for v in verdicts.values() if not v.ok and v.problem != "missing"]
        if bad and not error:
            say(
                f"the download ended without an error but {len(bad)} file(s) failed the check: {bad[0].path} "
                f"({bad[0].problem})"
            )
    return verdicts, error


def raise_for_verdicts(plan: Plan, verdicts: Mapping[str, Verdict], error: str) -> None:
    corrupt = [v for v in verdicts.values() if not v.ok and v.problem in ("size", "hash")]
    missing = [f.path for f in plan.files if f.path not in verdicts or verdicts[f.path].problem == "missing"]
    name = f"{plan.repo}@{plan.short}"
    if corrupt:
        listed = ", ".join(f"{v.path} ({'sha256' if v.problem == 'hash' else 'size'} mismatch)" for v in corrupt)
        raise FetchError(EXIT_CORRUPT, f"{name}: still corrupt after a re-fetch: {listed}")
    if missing:
        more = f"; huggingface_hub said: {error}" if error else ""
        raise FetchError(EXIT_INCOMPLETE, f"{name}: {len(missing)} file(s) not downloaded, e.g. {missing[0]}{more}")


def finish_fetch(places: Places, plan: Plan, peer: PeerUse | None) -> Path:
    """Marker, ownership, switch DIR, drop the previous snapshot."""
    snapshot = places.snapshot(plan)
    write_json_atomic(snapshot / MARKER, make_marker(plan, peer))
    lock_down(places.cache)
    drop_previous(places, switch_to(places, snapshot))
    return snapshot


def same_commit_is_live(places: Places, plan: Plan) -> bool:
    """DIR already is this commit's snapshot in the cache and looks whole: record the revision name, no
    download."""
    marker = read_marker(places.dest)
    if not places.in_cache() or not marker or (marker.get("repo"), marker.get("commit")) != (plan.repo, plan.commit):
        return False
    missing, wrong = marker_problems(places.dest, marker)
    if missing or wrong:
        return False
    if marker.get("revision") != plan.revision:
        marker = {**marker, "revision": plan.revision}
        write_json_atomic(places.dest / MARKER, marker)
    return True


def fetch(args: argparse.Namespace) -> int:
    places = Places(Path(args.dest).absolute())
    refuse_if_busy(places)  # before the status file: it belongs to the fetch that runs
    status = Status(Path(args.status_file), args.repo, args.revision)
    if quick_check(places.dest, args.repo, args.revision) == EXIT_OK:
        status.already_complete(read_marker(places.dest) or {})
        say(f"{args.repo}@{args.revision}: already complete in {places.dest} (marker matches; no network used)")
        return EXIT_OK
    status.update("resolving")
    peer = PeerUse(Peer.parse(args.peer, args.peer_wait_s)) if args.peer else None
    try:
        fetch_snapshot(args, places, status, peer)
    except FetchError as err:
        if err.code != EXIT_BUSY:
            status.finish(err.code, str(err))
        raise
    except Exception as exc:  # a bug or a full disk: the deploy still reads why from the status file
        status.finish(EXIT_ERROR, f"unexpected {type(exc).__name__}: {exc}")
        raise
    except (SystemExit, KeyboardInterrupt) as stop:  # SIGTERM (systemctl stop) or ^C: a re-run continues
        status.finish(EXIT_INCOMPLETE, "stopped by a signal; run fetch again to continue", "stopped")
        # Now: the library's download threads are not daemons, and the interpreter would let each finish the
        # file it is on (gigabytes) before it exits. The lock goes with the process.
        code = stop.code if isinstance(stop, SystemExit) and isinstance(stop.code, int) else 128 + signal.SIGINT
        sys.stdout.flush()
        os._exit(code)
    note = peer.note() if peer else ""
    status.finish(EXIT_OK, f"complete in {places.dest}" + (f" ({note})" if note else ""))
    return EXIT_OK


def second_opinion(plan: Plan, endpoint: str, resolver: Callable[..., Plan] = resolve) -> str:
    """hf_verify_endpoint: the hashes the files are checked against come from plan's endpoint; a second
    endpoint that lists the same commit must list the same hashes. The line to say when it agrees or cannot be
    asked; FetchError(4) naming a file when it disagrees (nothing is downloaded then)."""
    first, second = endpoint_host(plan.endpoint), endpoint_host(endpoint)
    try:
        other = resolver(plan.repo, plan.commit, endpoint, send_token=False)
    except FetchError as err:
        return f"{second} could not be asked ({err}); the files are checked against {first}'s hashes only"
    theirs = {f.path: f.sha256 or f.git_oid for f in other.files}
    differ = [f.path for f in plan.files if theirs.get(f.path) != (f.sha256 or f.git_oid)]
    if differ:
        raise FetchError(
            EXIT_CORRUPT,
            f"{plan.repo}@{plan.short}: {first} and {second} list other hashes for {len(differ)} of "
            f"{len(plan.files)} files (first: {differ[0]}); not downloading: one of them serves other files",
        )
    return f"{second} lists the same hashes for all {len(plan.files)} files of commit {plan.short}"


def fetch_snapshot(args: argparse.Namespace, places: Places, status: Status, peer: PeerUse | None = None) -> Path:
    """Preflight, then download, verify and switch; returns the snapshot DIR now points to."""
    plan = resolve(args.repo, args.revision, args.endpoint)
    say(f"{plan.repo}@{plan.revision} is commit {plan.commit}: {len(plan.files)} files, {human(plan.total_bytes)}")
    if getattr(args, "verify_endpoint", None):
        say(second_opinion(plan, args.verify_endpoint))
    if same_commit_is_live(places, plan):
        say(f"commit {plan.short} is already complete in {places.dest}")
        return places.dest.resolve()
    take_lock(places)
    prepare_snapshot(places, plan, status)
    check_space(places, plan)
    verdicts, error = download_and_verify(plan, places, status, args.max_workers, peer)
    raise_for_verdicts(plan, verdicts, error)
    status.update("switching")
    snapshot = finish_fetch(places, plan, peer)
    note = f"; {peer.note()}" if peer and peer.files else ""
    say(f"complete: {places.dest} -> snapshot {plan.commit} ({len(plan.files)} files verified by hash{note})")
    return snapshot


# ---- check --------------------------------------------------------------------------------------


def quick_check(dest: Path, repo: str, revision: str) -> int:
    """0 when DIR holds a marker for repo@revision and every listed file has its size; 3 or 4 otherwise."""
    marker = read_marker(dest)
    if not marker_matches(marker, repo, revision) or not Places(dest).in_cache():
        return EXIT_INCOMPLETE
    assert marker is not None
    missing, wrong = marker_problems(dest, marker)
    if wrong:
        return EXIT_CORRUPT
    return EXIT_INCOMPLETE if missing else EXIT_OK


def check(args: argparse.Namespace) -> int:
    dest = Path(args.dest).absolute()
    name = f"{args.repo}@{args.revision}"
    marker = read_marker(dest)
    if not marker_matches(marker, args.repo, args.revision):
        found = f"{marker['repo']}@{marker['revision']}" if marker else "no completion marker"
        say(f"{name}: incomplete in {dest} ({found})")
        return EXIT_INCOMPLETE
    assert marker is not None
    if not Places(dest).in_cache():
        say(f"{name}: in {dest}, not yet in huggingface_hub's cache (a fetch adopts its files, downloading none)")
        return EXIT_INCOMPLETE
    missing, wrong = marker_problems(dest, marker)
    if wrong:
        say(f"{name}: corrupt in {dest}: {', '.join(wrong)}")
        return EXIT_CORRUPT
    if missing:
        say(f"{name}: incomplete in {dest}: missing {', '.join(missing)}")
        return EXIT_INCOMPLETE
    peer = marker.get("from_peer") or {}
    came = f", {peer['files']} from model peer {peer['name']}" if peer.get("files") else ""
    files = len(marker["files"])
    say(f"{name}: complete, commit {marker['commit'][:12]}, {files} files (sizes checked{came}) in {dest.resolve()}")
    return EXIT_OK


# ---- command line ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="model_fetch.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def repo_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--repo", required=True, help="owner/name")
        p.add_argument("--revision", default="main", help="branch, tag or commit")
        p.add_argument("--dest", required=True, help="the model directory the service reads (a symlink)")

    p_fetch = sub.add_parser("fetch", help="download, verify and switch")
    repo_args(p_fetch)
    p_fetch.add_argument("--endpoint", default=None, help="HF endpoint or mirror (default: HF_ENDPOINT or the Hub)")
    p_fetch.add_argument("--disable-xet", action="store_true", help="plain HTTP downloads (HF_HUB_DISABLE_XET=1)")
    p_fetch.add_argument("--status-file", required=True, help="the JSON progress file the deploy reads")
    p_fetch.add_argument("--max-workers", type=int, default=8, help="parallel downloads (snapshot_download's)")
    p_fetch.add_argument("--verify-endpoint", default=None, help="a second endpoint whose hashes must match")
    p_fetch.add_argument("--peer", default=None, help="NAME=http://ADDRESS:PORT: a rig that serves this model")
    p_fetch.add_argument("--peer-wait-s", type=float, default=3600.0, help="how long to wait for the peer to hold it")
    repo_args(sub.add_parser("check", help="is DIR complete for repo@revision (offline, instant)"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "fetch":
        apply_env(hub_env(os.environ, args.endpoint, args.disable_xet))
        args.endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    signal.signal(signal.SIGTERM, on_sigterm)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "fetch": fetch,
        "check": check,
    }
    try:
        return commands[args.command](args)
    except FetchError as err:
        say(str(err), error=True)
        return err.code


if __name__ == "__main__":
    sys.exit(main())
