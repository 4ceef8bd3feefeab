"""A git checkout at a pinned commit, through a local cache of the remote.

pyinfra's git.repo follows a branch; it cannot pin a commit. This clones the remote once into a bare
cache (<install_root>/cache/git/<owner>+<name>.git) and fetches only the pinned commit, shallow, as GitHub's smart
HTTP serves it (every branch and tag where a mirror refuses a fetch by commit), then checks it out detached into
the runtime. A new runtime at the same commit needs no network.

Only a 40-hex commit is ever checked out: a tag (or branch) is whatever the remote or a mirror says it is today,
so a moved tag would choose the code. settings.py refuses a tag in every git-ref setting; `require_commit` is
the last guard here, so no path reaches a checkout with one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TypedDict

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command

SHA40 = re.compile(r"^[0-9a-f]{40}$")


class Checkout(TypedDict):
    head: str | None  # HEAD's commit; None when it is not a checkout


NO_CHECKOUT: Checkout = {"head": None}


class GitCheckouts(SectionFact[dict[str, Checkout]]):
    """{path: Checkout} for many checkouts, in one command. `checkouts`: (path, ref) pairs."""

    def command(self, checkouts: tuple[tuple[str, str], ...]) -> str:
        args = " ".join(shlex.quote(path) for path, _ref in checkouts)
        return section_command(
            {
                "checkouts": (
                    f"set -- {args}; "
                    'for p in "$@"; do h=$(git -C "$p" rev-parse -q --verify HEAD 2>/dev/null); '
                    'printf "%s\\t%s\\n" "$p" "$h"; done'
                )
            }
        )

    def parse(self, sections: Sections) -> dict[str, Checkout]:
        found: dict[str, Checkout] = {}
        for line in sections.lines("checkouts"):
            path, head = (line.rstrip("\n").split("\t") + ["", ""])[:2]
            if path:
                found[path] = {"head": head.strip() or None}
        return found

    DEFAULT: dict[str, Checkout] = {}


def require_commit(ref: str, label: str = "git ref") -> str:
    """`ref` when it is a 40-hex commit; ValueError (one line) otherwise."""
    if not SHA40.match(ref):
        raise ValueError(f"{label}: {ref!r} is not a 40-character commit SHA; a tag or branch can move")
    return ref


def checkout_matches(found: Checkout, ref: str) -> bool:
    """A checkout is at `ref` (a commit) when HEAD is that commit."""
    head = found.get("head")
    return bool(head) and SHA40.match(ref) is not None and head == ref


def fetch_script(url: str, ref: str, cache: str) -> str:
    """Shell that makes commit `ref` present in the bare cache, asking the remote only when it is missing."""
    require_commit(ref)
    c, u = shlex.quote(cache), shlex.quote(url)
    have = f"git -C {c} cat-file -e {ref}^{{commit}} 2>/dev/null"
    keep = f"git -C {c} update-ref refs/pins/{ref} {ref}"  # a ref keeps the commit from gc
    everything = shlex.quote("+refs/heads/*:refs/heads/*") + " " + shlex.quote("+refs/tags/*:refs/tags/*")
    return (
        f"{{ test -d {c} || git init -q --bare {c}; }} && "
        f"{{ {have} || git -C {c} fetch -q --depth=1 {u} {ref} || git -C {c} fetch -q {u} {everything}; }} && "
        f"{have} && {keep}"
    )


def cache_ref(ref: str) -> str:
    """The cache's ref that keeps commit `ref`."""
    return f"refs/pins/{require_commit(ref)}"


def checkout_script(url: str, ref: str, dest: str, cache: str) -> str:
    """Shell that replaces `dest` with a fresh checkout of commit `ref` from the cache (made beside it, then
    moved). Fetching the cache's ref (not cloning) works from a shallow cache too (--update-shallow); HEAD is
    checked to be the commit before the checkout replaces `dest`."""
    d, tmp, c = shlex.quote(dest), shlex.quote(dest + ".partial"), shlex.quote(cache)
    name = shlex.quote(cache_ref(ref))
    return (
        f"rm -rf {tmp} && mkdir -p {tmp} && git init -q {tmp} && "
        f"git -C {tmp} fetch -q --update-shallow {c} {name} && git -C {tmp} checkout -q --detach FETCH_HEAD && "
        f'test "$(git -C {tmp} rev-parse HEAD)" = {ref} && '
        f"git -C {tmp} remote add origin {shlex.quote(url)} && rm -rf {d} && mv {tmp} {d}"
    )


@dataclass(frozen=True)
class GitSource:
    """One pinned checkout: `url` at `ref` (a 40-character commit) in `dest`, via the bare `cache`."""

    label: str
    url: str
    ref: str
    dest: str
    cache: str


@operation()
def git_checkouts(sources: tuple[GitSource, ...]):
    """Each `dest` is a checkout of its `url` at its `ref`. Decided by HEAD, not by a marker (a half-made
    checkout is never at the commit, so the next run makes it again); all read with one command."""
    found = host.get_fact(GitCheckouts, checkouts=tuple((s.dest, s.ref) for s in sources))
    stale = [s for s in sources if not checkout_matches(found.get(s.dest, NO_CHECKOUT), s.ref)]
    if not stale:
        host.noop(", ".join(f"{s.label} at {s.ref[:12]}" for s in sources))
        return
    for source in stale:
        yield fetch_script(source.url, source.ref, source.cache)
        yield checkout_script(source.url, source.ref, source.dest, source.cache)
