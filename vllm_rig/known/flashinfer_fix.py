"""Which SM75 shared-memory fix a FlashInfer release needs.

The overflow exists from 0.6.10 through 0.6.15.post1: the prefill kernel's shared storage for the HD256 f16
tile grows past SM75's 65536-byte per-block limit (sizeof probed against each released flashinfer-python
wheel's headers: 65536 up to 0.6.9, 65568 to 65616 from 0.6.10, 65536 again from 0.6.16). It came with
flashinfer-ai/flashinfer#3097 (commit 4e6421913, first tagged v0.6.10). PR 3621
(https://github.com/flashinfer-ai/flashinfer/pull/3621, closed unmerged) applies to exactly one release,
0.6.14, whose prefill.cuh is the PR's base blob; the merged fix, PR 3526 (commit c18a974a8,
https://github.com/flashinfer-ai/flashinfer/pull/3526), applies to 0.6.15 and ships from v0.6.16.
"""

from __future__ import annotations

from packaging.version import Version

FIRST_BROKEN = Version("0.6.10")
FIRST_FIXED = Version("0.6.16")
PR3621_RELEASE = Version("0.6.14")
PR3526_RELEASE = Version("0.6.15")

# What `flashinfer_sm75_fix` may say.
CHOICES = ("auto", "pr3621", "upstream", "none")


def needs_fix(version: str) -> bool:
    """True when this release overflows SM75's 64 KiB shared memory in FA2 prefill."""
    return FIRST_BROKEN <= Version(version) < FIRST_FIXED


def patch_for(version: str) -> str | None:
    """The patch that fixes this release ("pr3621" or "pr3526"), or None when none applies."""
    release = Version(Version(version).base_version)
    if release == PR3621_RELEASE:
        return "pr3621"
    if release == PR3526_RELEASE:
        return "pr3526"
    return None


def resolve(version: str, choice: str) -> str | None:
    """The patch to apply for `choice` on `version`, or None for no patch.

    Raises ValueError with a sentence a user can act on when the combination cannot work.
    """
    works = "use 0.6.14 (PR 3621), 0.6.15 (PR 3526), <=0.6.9 or >=0.6.16 (no fix needed)"
    if not needs_fix(version):
        if choice == "pr3621":
            raise ValueError(f"PR 3621 applies only to FlashInfer 0.6.14; {version} needs no fix (use auto)")
        return None
    patch = patch_for(version)
    if patch is None:
        raise ValueError(f"FlashInfer {version} overflows SM75 shared memory and no public fix applies to it; {works}")
    if choice == "none":
        raise ValueError(f"FlashInfer {version} fails on SM75 without its fix; use auto")
    if choice == "pr3621" and patch != "pr3621":
        raise ValueError(f"PR 3621 applies only to FlashInfer 0.6.14, not {version}; use auto or upstream")
    if choice == "upstream" and patch != "pr3526":
        raise ValueError(f"the upstream fix (PR 3526) applies only to 0.6.15; for {version} use auto or pr3621")
    return patch
