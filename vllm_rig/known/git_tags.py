"""Release tags that the defaults once named, and the commit each one names.

A git source is pinned by a 40-hex commit only: a tag is whatever the remote, or a mirror in front of it, says
it is on the day of the fetch, so a moved tag would choose the code that is built, signed and installed. A tag
in a git-ref setting is refused in one line that names the commit it should be, where it is recorded here.
"""

from __future__ import annotations

import re

SHA40 = re.compile(r"^[0-9a-f]{40}$")

# repository (owner/name) -> tag -> its commit, or None where the commit could not be confirmed.
TAG_COMMITS: dict[str, dict[str, str | None]] = {
    # v4.4.2 is a lightweight tag on this commit, read in a snapshot of the repository's own refs (the fork's
    # build.sh and vLLM 0.26.0/0.27.1's CUTLASS_REVISION name the tag).
    "NVIDIA/cutlass": {"v4.4.2": "da5e086dab31d63815acafdac9a9c5893b1c69e2"},
    # v3.6.0 (the fork's build.sh): the commit that independent public pins name for the tag, none of them this
    # project's: a later build script of the 2080 Ti fork family (TRITON_TAG, beside CUTLASS v4.4.2's da5e086d), a
    # gfx906 vLLM build that rewrote vLLM's FetchContent tag v3.6.0 to it, a pin recorded as the tip of
    # release/3.6.x, and a benchmark's "official 3.6.0" commit. The tag itself could not be read here (the
    # repository is too big to mirror), so this rests on those pins agreeing.
    # v3.5.1 (vLLM 0.26.0/0.27.1's DEFAULT_TRITON_KERNELS_TAG): its commit was not found in any source read here;
    # read it with `git ls-remote` from a machine you trust.
    "triton-lang/triton": {"v3.6.0": "7c56a5e40f7fd928dfd5c72902d5def0097db73a", "v3.5.1": None},
}


def commit_of(tag: str, repo: str | None = None) -> tuple[str, str | None] | None:
    """(owner/name, commit or None) of a recorded `tag`, in `repo` (a URL or owner/name) when given."""
    for name, tags in TAG_COMMITS.items():
        if tag in tags and (repo is None or name.lower() in repo.lower()):
            return name, tags[tag]
    return None


def ref_problem(ref: str, repo: str | None = None) -> str | None:
    """None for a 40-hex commit; else one line: the commit the tag should be, or that a commit is required."""
    if SHA40.match(ref):
        return None
    known = commit_of(ref, repo)
    if known and known[1]:
        return f"{ref!r} is a tag, and a tag can move: use its commit {known[1]} ({known[0]} {ref})"
    where = f" (the commit of {known[0]} {ref} is not recorded here: read it with git ls-remote)" if known else ""
    return f"{ref!r} must be a 40-character lower-case commit SHA: a tag or branch can move{where}"
