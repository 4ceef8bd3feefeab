#!/usr/bin/env python3
"""Releases of the fork on one line (tags vX.Y.N of the line vX.Y) against the commit a host pins. Stdlib and git.

    vllm-rig-host.pyz fork_releases --url URL --line v0.1 --ref SHA [--cache DIR]

Asks the remote for its tags (`git ls-remote --tags URL`; URL carries git_mirror_prefix) and, when the runtime
stage's bare git cache of the fork exists, fetches the line's tags into it, so that which release `--ref` is
(the newest tag that is an ancestor of it, or equal) is read from the history, and an update then builds from
the cache. Pre-releases (v0.2.1-pre2, rc, dev) and other lines are not releases of the line.

Prints one JSON object: {"url", "line", "ref", "current": tag or null, "releases": [{"tag", "commit",
"version", "newer"}], "error": null or why}. Exit codes: 0 listed, 2 the remote could not be asked.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

TAG = re.compile(r"^v?(\d+(?:\.\d+)*)$")  # a plain release tag; anything after the numbers is a pre-release
EXIT_OK = 0
EXIT_UNREACHABLE = 2


def git(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout, env=env)


def numbers(tag: str) -> tuple[int, ...] | None:
    match = TAG.match(tag)
    return tuple(int(n) for n in match.group(1).split(".")) if match else None


def on_line(tag: str, line: str) -> bool:
    """v0.1.18 is on the line v0.1; v0.1 itself, v0.2.1-pre2 and v0.10.1 are not."""
    version, base = numbers(tag), numbers(line)
    return version is not None and base is not None and len(version) > len(base) and version[: len(base)] == base


def remote_tags(listing: str) -> dict[str, str]:
    """tag -> commit from `git ls-remote --tags` output (an annotated tag's peeled ^{} line wins)."""
    tags: dict[str, str] = {}
    for row in listing.splitlines():
        sha, _, ref = row.partition("\t")
        if not ref.startswith("refs/tags/"):
            continue
        name = ref.removeprefix("refs/tags/")
        if name.endswith("^{}"):
            tags[name[:-3]] = sha
        else:
            tags.setdefault(name, sha)
    return tags


def is_ancestor(cache: Path, commit: str, ref: str) -> bool | None:
    """Whether `commit` is `ref` or one of its ancestors in the cache (None when the cache cannot tell)."""
    run = git("-C", str(cache), "merge-base", "--is-ancestor", commit, ref)
    return {0: True, 1: False}.get(run.returncode)


def is_shallow(cache: Path) -> bool:
    return git("-C", str(cache), "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def releases(url: str, line: str, ref: str, cache: Path | None) -> dict:
    out: dict = {"url": url, "line": line, "ref": ref, "current": None, "releases": [], "error": None}
    listed = git("ls-remote", "--tags", url)
    if listed.returncode != 0:
        out["error"] = f"git ls-remote --tags {url} failed: {(listed.stderr.strip() or 'no output')[-300:]}"
        return out
    tags = {t: c for t, c in remote_tags(listed.stdout).items() if on_line(t, line)}
    history = cache is not None and (cache / "HEAD").is_file()
    if history and tags and cache is not None:
        # The line's tags into the cache (one fetch; what is there already is not fetched again). The runtime stage's
        # cache holds the pin alone (a shallow fetch by commit), so the pin's history comes too (--unshallow): without
        # it no tag could be seen to be the pin's ancestor. The tags bring most of that history anyway.
        specs = [f"+refs/tags/{t}:refs/tags/{t}" for t in sorted(tags)]
        deepen = ["--unshallow", url, ref] if is_shallow(cache) else [url]
        fetched = git("-C", str(cache), "fetch", "-q", *deepen, *specs, timeout=600)
        history = (
            fetched.returncode == 0 and git("-C", str(cache), "cat-file", "-e", f"{ref}^{{commit}}").returncode == 0
        )
    ordered = sorted(tags.items(), key=lambda item: numbers(item[0]) or ())
    behind = [t for t, c in ordered if c == ref or (history and cache is not None and is_ancestor(cache, c, ref))]
    current = behind[-1] if behind else None
    out["current"] = current
    floor = numbers(current) if current else None
    known = current is not None or history  # without either, nothing says which releases come after the pin
    for tag, commit in ordered:
        newer = commit != ref and tag not in behind and (floor is None or (numbers(tag) or ()) > floor)
        out["releases"].append(
            {"tag": tag, "commit": commit, "version": tag.lstrip("v"), "newer": newer if known else None}
        )
    if current is None and not history:
        out["error"] = "which release the pinned commit is could not be read (no git cache of the fork yet)"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fork_releases.py", description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--line", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--cache")
    args = p.parse_args(argv)
    result = releases(args.url, args.line, args.ref, Path(args.cache) if args.cache else None)
    print(json.dumps(result))
    return EXIT_UNREACHABLE if result["error"] and not result["releases"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
