"""Each kept lock (locks/) still resolves against the real index: the resolver (uv, requirements-dev.txt) given the
same set today pins the same versions, and every file hash the lock holds is one the index still serves for it.
Needs PyPI; a lock that needs the torch index is checked only where the torch index answers."""

from __future__ import annotations

import urllib.request

import pytest

from vllm_rig.cli.locks import settings_to_lock
from vllm_rig.host import runtime_build
from vllm_rig.stages import locks
from vllm_rig.stages.locks import make
from vllm_rig.stages.runtime import kinds, plan


def _kept() -> dict[str, make.Target]:
    found = {}
    for s in settings_to_lock():
        name = plan.runtime_lock_name(s)
        if (locks.directory(s) / name).is_file() and kinds.of(s).lock_tree is None:
            found[name] = make.runtime_target(s, [])
        found[locks.tools_name(s)] = make.tools_target(s)
    return found


KEPT = _kept()


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=20).close()  # noqa: S310 - the settings' own https index
    except OSError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(KEPT))
def test_a_kept_lock_still_resolves_against_the_real_index(name: str) -> None:
    target = KEPT[name]
    if target.extra_index and not _reachable(target.extra_index):
        pytest.skip(f"{target.extra_index} does not answer from here")
    kept = (locks.REPO / locks.DEFAULT_DIR / name).read_text()
    python = name.rsplit("-py", 1)[1].removesuffix(".txt")
    fresh = make.compile_lock(target, python, make.PLATFORM)
    assert locks.entries(fresh) == locks.entries(kept), "the resolver pins another set today: run bin/locks"
    fresh_blocks = runtime_build.lock_blocks(fresh)
    for dist, block in runtime_build.lock_blocks(kept).items():
        gone = [h for h in block.split() if h.startswith("--hash=") and h not in fresh_blocks[dist]]
        assert gone == [], f"{dist}: the index no longer serves {gone}"
