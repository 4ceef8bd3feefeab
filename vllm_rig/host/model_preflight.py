#!/usr/bin/env python3
"""Model preflight: does the endpoint have repo@revision, and does the disk hold it? Read-only, stdlib only.

Runs with the host's system python3 before anything is installed (the tools venv with huggingface_hub comes
later), so it speaks the two Hub API calls `hf download` itself makes:

    GET <endpoint>/api/models/<repo>/revision/<rev>               -> {"sha": <commit>}
    GET <endpoint>/api/models/<repo>/tree/<commit>?recursive=true  -> [{"type": "file", "size": n}, ...]

    model_preflight.py --endpoint URL --repo R --revision REV --dest DIR

HF_TOKEN, when set in the environment, is sent as a bearer token (never on a redirect). The deploy feeds this
file and the token through stdin, so neither the token nor an uploaded file is needed on the host.

Prints one JSON line and exits 0 when it reached a verdict:
  {"ok": true,  "state": "complete", ...}  the marker of a complete download for repo@revision is in DIR: the
                                           endpoint is not asked (a re-run needs no network)
  {"ok": true,  "state": "fetch", "commit", "total_bytes", "file_count", "need_bytes", "free_bytes", "where"}
  {"ok": false, "kind": "endpoint" | "unreachable" | "disk", "problem": "<one line naming repo and endpoint>"}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from .model_fetch import DISK_HEADROOM, marker_matches, marker_problems, read_marker
from .units import human

if TYPE_CHECKING:  # imported where the endpoint is asked: ~30 ms that a model complete on the host never needs
    import urllib.error
    import urllib.request

SHA40 = re.compile(r"^[0-9a-f]{40}$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
RETRY_DELAYS_S = (1.0, 2.0)  # a mirror that blips for a second is not "down"
TIMEOUT_S = 20.0
MAX_PAGES = 100


class Refused(Exception):
    """A verdict that stops the deploy: its kind and the one line that says why."""

    def __init__(self, kind: str, problem: str) -> None:
        super().__init__(problem)
        self.kind = kind
        self.problem = problem


def endpoint_host(endpoint: str) -> str:
    """scheme://host[:port] only: no path, and never credentials someone put in the URL."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"


# ---- what is on the disk already -----------------------------------------------------------------


def complete_marker(dest: Path, repo: str, revision: str) -> dict[str, Any] | None:
    """The marker when DIR holds repo@revision whole (every listed file at its size), else None."""
    marker = read_marker(dest)
    if not marker or not marker_matches(marker, repo, revision):
        return None
    missing, wrong = marker_problems(dest, marker)
    return None if missing or wrong else marker


def bytes_present(dest: Path, repo: str, files: list[dict[str, Any]]) -> int:
    """Bytes a fetch would not download again: files of the right size in DIR (adopted if it is not in the
    cache yet), or blobs huggingface_hub's cache beside it holds already (named by the file's ETag)."""
    blobs = dest.parent / "hf-cache" / f"models--{repo.replace('/', '--')}" / "blobs"
    have = 0
    for entry in files:
        etag = entry["etag"] if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", entry["etag"]) else "-"  # only a name
        for path in (dest / entry["path"], blobs / etag):
            try:
                if path.stat().st_size == entry["size"]:
                    have += entry["size"]
                    break
            except OSError:
                continue
    return have


def existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# ---- the endpoint -----------------------------------------------------------------------------------


def _opener(endpoint: str) -> urllib.request.OpenerDirector:
    """Redirects are followed; the token is an unredirected header, so it never goes along."""
    import urllib.request

    handlers: list[urllib.request.BaseHandler] = []
    if urlsplit(endpoint).hostname in LOOPBACK:
        handlers.append(urllib.request.ProxyHandler({}))  # a proxy never reaches a mirror on this box
    return urllib.request.build_opener(*handlers)


def _request(url: str) -> urllib.request.Request:
    import urllib.request

    req = urllib.request.Request(url, headers={"User-Agent": "vllm-rig-preflight", "Accept": "application/json"})
    token = os.environ.get("HF_TOKEN")
    if token:
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    return req


def _describe_http(err: urllib.error.HTTPError, name: str, where: str) -> Refused:
    code = err.headers.get("X-Error-Code") if err.headers else None
    if code == "GatedRepo":
        gated = "a gated repo: set hf_token to an account with access"
        return Refused("endpoint", f"{name}: access denied at {where} ({gated})")
    if code == "RevisionNotFound":
        return Refused("endpoint", f"{name}: no such revision at {where}")
    if code == "RepoNotFound":
        return Refused("endpoint", f"{name}: repository not found at {where} (or private: set hf_token)")
    if err.code == 404:
        return Refused("endpoint", f"{name}: not found at {where} (HTTP 404)")
    if err.code in (401, 403):
        return Refused("endpoint", f"{name}: access denied at {where} (HTTP {err.code}: check hf_token)")
    return Refused("unreachable", f"{name}: {where} answered HTTP {err.code}")


def get_json(opener: urllib.request.OpenerDirector, url: str, name: str, where: str) -> tuple[Any, str | None]:
    """(decoded JSON, the next page's URL or None); transport errors and 5xx are retried twice."""
    import urllib.error

    for delay in (*RETRY_DELAYS_S, None):
        try:
            with opener.open(_request(url), timeout=TIMEOUT_S) as resp:
                body = resp.read()
                link = resp.headers.get("Link") or ""
            break
        except urllib.error.HTTPError as err:
            refused = _describe_http(err, name, where)
            if err.code < 500:
                raise refused from None
        except (urllib.error.URLError, OSError) as err:  # refused, reset, timed out, no such host
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            first = (str(reason).strip().splitlines() or [""])[0]
            refused = Refused("unreachable", f"{name}: could not reach {where} ({type(reason).__name__}: {first})")
        if delay is None:
            raise refused
        time.sleep(delay)
    try:
        data = json.loads(body)
    except ValueError:
        raise Refused("unreachable", f"{name}: {where} gave an answer that is not JSON") from None
    match = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return data, match.group(1) if match else None


def resolve(endpoint: str, repo: str, revision: str) -> tuple[str, list[dict[str, Any]]]:
    """The commit of repo@revision and its files [{"path", "size", "etag"}]."""
    name, where = f"{repo}@{revision}", endpoint_host(endpoint)
    opener = _opener(endpoint)
    base = f"{endpoint.rstrip('/')}/api/models/{repo}"
    info, _ = get_json(opener, f"{base}/revision/{quote(revision, safe='')}", name, where)
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not SHA40.match(commit):
        raise Refused("endpoint", f"{name}: {where} gave no commit sha")
    files: list[dict[str, Any]] = []
    url: str | None = f"{base}/tree/{commit}?recursive=true"
    for _ in range(MAX_PAGES):
        if url is None:
            break
        page, url = get_json(opener, url, name, where)
        if not isinstance(page, list):
            raise Refused("endpoint", f"{name}: {where} gave a file list that is not a list")
        files += [
            {"path": e["path"], "size": int(e["size"]), "etag": str((e.get("lfs") or {}).get("oid") or e.get("oid"))}
            for e in page
            if e.get("type") == "file"
        ]
    if not files:
        raise Refused("endpoint", f"{name}: {where} lists no files at {commit[:12]}")
    return commit, files


# ---- verdict ----------------------------------------------------------------------------------------


def verdict(endpoint: str, repo: str, revision: str, dest: Path) -> dict[str, Any]:
    marker = complete_marker(dest, repo, revision)
    if marker is not None:
        return {
            "ok": True,
            "state": "complete",
            "commit": marker.get("commit"),
            "total_bytes": marker.get("total_bytes"),
            "file_count": len(marker.get("files") or {}),
        }
    commit, files = resolve(endpoint, repo, revision)
    total = sum(f["size"] for f in files)
    need = max(0, total - bytes_present(dest, repo, files)) + DISK_HEADROOM
    where = existing_parent(dest.parent)
    free = shutil.disk_usage(where).free
    result = {
        "ok": True,
        "state": "fetch",
        "commit": commit,
        "total_bytes": total,
        "file_count": len(files),
        "need_bytes": need,
        "free_bytes": free,
        "where": str(where),
    }
    if free < need:
        problem = f"{repo}@{commit[:12]}: needs {human(need)} in {where}, {human(free)} free"
        result.update(ok=False, kind="disk", problem=problem)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="model_preflight.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--dest", required=True, help="the model directory (model_dir)")
    args = parser.parse_args(argv)
    try:
        result = verdict(args.endpoint, args.repo, args.revision, Path(args.dest))
    except Refused as refused:
        result = {"ok": False, "kind": refused.kind, "problem": refused.problem}
    token = os.environ.get("HF_TOKEN")
    line = json.dumps(result, sort_keys=True)
    print(line.replace(token, "<redacted>") if token else line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
