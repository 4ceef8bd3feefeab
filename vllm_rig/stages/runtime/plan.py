"""The runtime stage's decisions as pure functions: what a build is made of (its fingerprint), where it
goes, how many compile jobs it may run, which runtime directory a deploy uses, and the build spec the
host-side build script (vllm_rig/host/runtime_build.py) reads.

A runtime is named by its build fingerprint: the hash of everything that changes what gets built (the
CUDA toolkit, Python, the arch list, the pins, the fork/FlashQLA/CUTLASS/Triton commits, FlashInfer and
its fix). Where things come from (index and mirror URLs) is not part of it: the same pins from a mirror
are the same build. A changed fingerprint builds a new runtime beside the old one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages import locks
from vllm_rig.stages.runtime import kinds
from vllm_rig.stages.runtime.facts import Runtimes
from vllm_rig.stages.runtime.kinds.base import DROPPED_PACKAGES

# Bump when the build script changes what a runtime contains, so every host builds anew.
BUILD_FORMAT = 3
NAME_LENGTH = 16  # hex digits of the fingerprint in a runtime's directory name
JOB_CAP = 8  # the fork's build.sh caps automatic MAX_JOBS at 8
GB_PER_JOB = 3  # ... and allows about 3 GB of RAM per compile job
GB_RESERVED = 3  # ... after keeping 3 GB for the system


def build_inputs(s: Settings) -> dict[str, Any]:
    """Everything that changes what gets built. Its hash names the runtime."""
    patch = s.flashinfer_patch_data()
    fix = None if patch is None else {"patch": patch["patch"], "files": _fix_hashes(patch)}
    # The lock's bytes: a changed lock (another file hashed, another version) is another runtime.
    lock = runtime_lock_or_none(s)
    locked = {"lock": None if lock is None else lock.sha256}
    return {"format": BUILD_FORMAT, **locked, **kinds.of(s).build_inputs(s, fix)}


def _fix_hashes(patch: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each fixed header's sha256 before and after: what the fix is. Its URL only says where it comes from."""
    return {path: {"before": f["before"], "after": f["after"]} for path, f in patch["files"].items()}


def fix_download(s: Settings, patch: dict[str, Any]) -> dict[str, Any]:
    """The fix as the build needs it: each fixed header's URL (mirror prefix in front) and its sha256s."""
    files = {path: {**f, "url": s.git_mirror_prefix + f["url"]} for path, f in patch["files"].items()}
    return {"patch": patch["patch"], "files": files}


def fingerprint(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def max_jobs(setting: int | str, threads: int, ram_gb: float) -> int:
    """MAX_JOBS: the setting when it is a number, else min(8, threads, (RAM GB - 3) / 3), at least 1."""
    if setting != "auto":
        return int(setting)
    return max(1, min(JOB_CAP, threads, int((ram_gb - GB_RESERVED) // GB_PER_JOB)))


@dataclass(frozen=True)
class Choice:
    """Which runtime directory this deploy uses, and what it has to do there."""

    name: str
    action: str  # "keep" (current, complete), "switch" (complete), "build" (new or resumed), "rolled-back"


def runtime_names(fp: str) -> list[str]:
    """Names a fingerprint's runtimes may take: <fp16>, then <fp16>-2, -3 ... for forced rebuilds."""
    base = fp[:NAME_LENGTH]
    return [base] + [f"{base}-{i}" for i in range(2, 100)]


def choose(fp: str, state: Runtimes, force: bool, retry_rolled_back: bool = False) -> Choice:
    """Pick the runtime directory for fingerprint `fp`, given the host's runtimes (facts.runtime.RuntimeState).

    Without force: the current runtime when it is this build; else a complete one to switch to; else an
    unfinished one to resume (a re-run re-attaches to its build); else a new directory. A complete runtime
    that was rolled back away from is not switched to again (the deploy stops and says why). With force:
    resume an unfinished one, else a new directory beside the others. `retry_rolled_back` (a guarded fork
    update trying a release again) treats a rolled-back runtime as usable.
    """
    runtimes = state["runtimes"]
    names = runtime_names(fp)
    mine = [n for n in names if n in runtimes and runtimes[n].get("fingerprint") == fp]
    complete = [n for n in mine if runtimes[n].get("complete")]
    usable = [n for n in complete if retry_rolled_back or not runtimes[n].get("rolled_back")]
    unfinished = [n for n in mine if not runtimes[n].get("complete")]
    current = state.get("current")
    if not force:
        if current in usable:
            return Choice(current, "keep")
        if usable:
            return Choice(usable[-1], "switch")
        if complete:
            return Choice(complete[-1], "rolled-back")
    if unfinished:
        return Choice(unfinished[-1], "build")
    free = next(n for n in names if n not in runtimes)
    return Choice(free, "build")


def input_differences(wanted: dict[str, Any], running: dict[str, Any]) -> list[str]:
    """Build inputs that differ between the settings and a built runtime, as "key: settings / runtime"."""

    def show(value: Any) -> str:
        return json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)

    return [
        f"{key}: {show(wanted.get(key))} / {show(running.get(key))}"
        for key in sorted(set(wanted) | set(running))
        if wanted.get(key) != running.get(key)
    ]


def rolled_back_problem(name: str, root: str, differences: list[str]) -> str:
    """Why the deploy stops instead of switching back to a runtime someone rolled back from."""
    runs_now = f" (settings / what runs now: {'; '.join(differences)})" if differences else ""
    return (
        f"the runtime these settings build ({root}/runtimes/{name}) was rolled back away from "
        f"({root}/runtimes/{name}/rolled-back){runs_now}; change the settings to what runs now, set "
        f"force_rebuild=true to build it anew, or delete that marker to switch to it again"
    )


def git_sources(s: Settings, dirs: RuntimeDirs) -> list[tuple[str, str, str, str]]:
    """(label, url, ref, checkout dir) of each source the build needs, mirror prefix applied."""
    return kinds.of(s).git_sources(s, dirs)


def cache_name(url: str) -> str:
    """A git cache directory name from a remote URL: .../weicj/vLLM-2080Ti-Definitive.git -> weicj+vLLM-...."""
    parts = [p for p in url.rstrip("/").removesuffix(".git").split("/") if p]
    return "+".join(parts[-2:])


# What decides the set a runtime's lock resolves (its name carries their digest: another pin, another lock).
LOCK_KEYS = (
    "kind",
    "pins",
    "overrides",
    "replace",
    "drop",
    "torch_packages",
    "torch_exact",
    "build_requires",
    "lane_extras",
    "cuda_toolkit",
)


def lock_inputs(s: Settings) -> dict[str, Any]:
    """The parts of the build spec that decide what the runtime's lock holds (the source tree's own lines aside:
    the commit or release in the lock's name fixes them)."""
    spec = _spec(s, RuntimeDirs(s.install_root, "lock"), "0" * 64, {}, 1)
    return {key: spec.get(key) for key in LOCK_KEYS}


def runtime_lock_name(s: Settings) -> str:
    """The runtime build's lock file: what it installs decides the name (kind, release or commit, torch lane, and
    a digest of the pins and the rest of the set the build resolves: a changed pin is another lock, never a stale
    one)."""
    digest = hashlib.sha256(json.dumps(lock_inputs(s), sort_keys=True).encode()).hexdigest()[:8]
    return kinds.of(s).lock_name(s, f"{digest}-py{s.python_version}")


def runtime_lock(s: Settings) -> locks.Lock:
    """The runtime build's hashed lock (locks.LockMissing when locks_dir has none)."""
    return locks.read(s, runtime_lock_name(s), kinds.of(s).lock_what(s))


def runtime_lock_or_none(s: Settings) -> locks.Lock | None:
    """For the plan: a missing lock is written or said before any host is touched (first_use), so here it is
    only absent."""
    try:
        return runtime_lock(s)
    except locks.LockMissing:
        return None


def build_spec(s: Settings, dirs: RuntimeDirs, fp: str, inputs: dict[str, Any], jobs: int) -> dict[str, Any]:
    """What vllm_rig/host/runtime_build.py needs on the host: paths, pins, sources, indexes, the FlashInfer fix and
    the hashed lock. Written 0600: index URLs may carry credentials."""
    lock = runtime_lock_or_none(s)  # none: the deploy has stopped before (first_use)
    locked = None if lock is None else {"name": lock.name, "text": lock.text}
    return {**_spec(s, dirs, fp, inputs, jobs), "lock": locked}


def _spec(s: Settings, dirs: RuntimeDirs, fp: str, inputs: dict[str, Any], jobs: int) -> dict[str, Any]:
    layout = Layout.of(s)
    patch = s.flashinfer_patch_data()
    common = {
        "name": dirs.name,
        "fingerprint": fp,
        "inputs": inputs,
        "runtime": dirs.dir,
        "python": f"python{s.python_version}",
        "python_version": s.python_version,
        "max_jobs": jobs,
        "pip_index_url": s.pip_index_url,
        "flashinfer_fix": None if patch is None else fix_download(s, patch),
        "cache": dirs.cache,
        "check_script": layout.flashinfer_check,
        "kv_cache_dtype": s.kv_cache_dtype,  # the shared-memory probe judges the tile this KV cache uses
        "drop": list(DROPPED_PACKAGES),
    }
    kind = kinds.of(s)
    return {**common, "kind": kind.name, "cuda_home": kind.cuda_home(s, dirs.dir), **kind.spec_part(s, dirs)}
