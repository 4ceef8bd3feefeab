"""A git checkout at a pinned commit (or release tag), through a local cache of the remote.

pyinfra's git.repo follows a branch; it cannot pin a commit. This clones the remote once into a bare
cache (<install_root>/cache/git/<owner>+<name>.git) and fetches only the pinned commit (shallow where the
server allows it, in full over git's dumb HTTP or where fetching by commit is refused), then checks it
out detached into the runtime. A new runtime at the same commit needs no network.
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
    tag: str | None  # the commit `ref` names as a tag there, or None


NO_CHECKOUT: Checkout = {"head": None, "tag": None}


class GitCheckouts(SectionFact[dict[str, Checkout]]):
    """{path: Checkout} for many checkouts, in one command. `checkouts`: (path, ref) pairs."""

    def command(self, checkouts: tuple[tuple[str, str], ...]) -> str:
        args = " ".join(shlex.quote(x) for pair in checkouts for x in pair)
        return section_command(
            {
                "checkouts": (
                    f"set -- {args}; "
                    'while [ $# -gt 1 ]; do h=$(git -C "$1" rev-parse -q --verify HEAD 2>/dev/null); '
                    't=$(git -C "$1" rev-parse -q --verify "refs/tags/$2^{commit}" 2>/dev/null); '
                    'printf "%s\\t%s\\t%s\\n" "$1" "$h" "$t"; shift 2; done'
                )
            }
        )

    def parse(self, sections: Sections) -> dict[str, Checkout]:
        found: dict[str, Checkout] = {}
        for line in sections.lines("checkouts"):
            path, head, tag = (line.rstrip("\n").split("\t") + ["", "", ""])[:3]
            if path:
                found[path] = {"head": head.strip() or None, "tag": tag.strip() or None}
        return found

    @staticmethod
    def default() -> dict[str, Checkout]:
        return {}


def checkout_matches(found: Checkout, ref: str) -> bool:
    """A checkout is at `ref` when HEAD is that commit, or `ref` is a tag there that points at HEAD."""
    head = found.get("head")
    return bool(head) and (head == ref or found.get("tag") == head)


def fetch_script(url: str, ref: str, cache: str) -> str:
    """Shell that makes `ref` present in the bare cache, asking the remote only when it is missing."""
    c, u = shlex.quote(cache), shlex.quote(url)
    if SHA40.match(ref):
        have = f"git -C {c} cat-file -e {ref}^{{commit}} 2>/dev/null"
        refspec = ref
        keep = f"git -C {c} update-ref refs/pins/{ref} {ref}"  # a ref keeps the commit from gc
    else:
        tag = f"refs/tags/{ref}"
        have = f"git -C {c} rev-parse -q --verify {shlex.quote(tag + '^{commit}')} >/dev/null"
        refspec = shlex.quote(f"+{tag}:{tag}")
        keep = "true"
    everything = shlex.quote("+refs/heads/*:refs/heads/*") + " " + shlex.quote("+refs/tags/*:refs/tags/*")
    return (
        f"{{ test -d {c} || git init -q --bare {c}; }} && "
        f"{{ {have} || git -C {c} fetch -q --depth=1 {u} {refspec} 2>/dev/null || git -C {c} fetch -q {u} {refspec} "
        f"|| git -C {c} fetch -q {u} {everything}; }} && {have} && {keep}"
    )


def cache_ref(ref: str) -> str:
    """The cache's ref for `ref`: refs/pins/<sha> for a commit, refs/tags/<tag> for a tag."""
    return f"refs/pins/{ref}" if SHA40.match(ref) else f"refs/tags/{ref}"


def checkout_script(url: str, ref: str, dest: str, cache: str) -> str:
    """Shell that replaces `dest` with a fresh checkout of `ref` from the cache (made beside it, then moved).
    Fetching the cache's ref (not cloning) works from a shallow cache too (--update-shallow)."""
    d, tmp, c = shlex.quote(dest), shlex.quote(dest + ".partial"), shlex.quote(cache)
    name = cache_ref(ref)
    refspec = shlex.quote(f"+{name}:{name}") if name.startswith("refs/tags/") else shlex.quote(name)
    return (
        f"rm -rf {tmp} && mkdir -p {tmp} && git init -q {tmp} && "
        f"git -C {tmp} fetch -q --update-shallow {c} {refspec} && git -C {tmp} checkout -q --detach FETCH_HEAD && "
        f"git -C {tmp} remote add origin {shlex.quote(url)} && rm -rf {d} && mv {tmp} {d}"
    )


@dataclass(frozen=True)
class GitSource:
    """One pinned checkout: `url` at `ref` (a 40-character commit or a tag) in `dest`, via the bare `cache`."""

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
