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

# sizeof(SharedStorageQKVO<1, 64, 32, 256, 256, half, KV, half>), the head-size-256 prefill tile SM75 uses, against
# the 65,536-byte opt-in limit: compiled for sm_75 with nvcc 13.0 from each PyPI wheel's own headers
# (tests/real/test_real_flashinfer_smem.py; docs/upstream-facts.md). 0.6.14 and 0.6.15: 65,616 B (FP16 KV) and
# 65,600 B (FP8 KV); 0.6.16.post3 to 0.7.4: 65,536 B both.
SMEM_LIMIT = 65536


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


def fp8_kv_fits(version: str, patch: str | None) -> bool:
    """True when the head-size-256 prefill with an FP8 (1-byte) KV cache runs on SM75 with this release and fix.

    A release without the overflow fits. PR 3526 (0.6.15 + its headers = 0.6.16's) fits. PR 3621 does not: it
    shrinks the KV tile from the real sizeof to NUM_MMA_KV = 1, and the release's own prefill.cuh refuses that for
    1-byte KV (`NUM_MMA_KV * 2 % NUM_WARPS_Q != 0` with NUM_WARPS_Q = 4), the "Invalid configuration ...
    NUM_MMA_KV=1 NUM_WARPS_Q=4" owners of 2080 Ti pairs reported on flashinfer-ai/flashinfer#3621. FP16 KV has no
    such clause and runs there with the half-size tile.
    """
    return not needs_fix(version) or patch == "pr3526"


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
