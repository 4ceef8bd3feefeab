"""bin/locks [--out DIR] [--fork-tree DIR]: write the project's hashed install locks.

One lock per runtime build the settings accept (the upstream kind's release wheel for every supported release, its
compile where the release's source archive is recorded, the fork at each profile's fork_ref) and one for the tools
venv, each for the profile's Python, from the indexes the settings name. A lock whose index cannot be reached here
is said, not written, and the command exits 1 naming it.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_rig.known import flashinfer_fix, upstream_compile, upstream_releases
from vllm_rig.settings import Settings
from vllm_rig.stages.locks import REPO, make, tools_name
from vllm_rig.stages.runtime.plan import runtime_lock_name
from vllm_rig.validation import SettingsError, load_settings

PROFILES = (None, "qwen38", "fork_validated")


def group_data(name: str) -> dict[str, Any]:
    """A group_data file's settings, read as pyinfra reads it (top-level names, no imports or _private)."""
    namespace: dict[str, Any] = {}
    path = REPO / "group_data" / f"{name}.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the project's own data file
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)}


def profile(name: str | None, **over: Any) -> Settings | None:
    data = {**group_data("all"), **(group_data(name) if name else {}), **over}
    # Before validation: the settings refuse an FP8 KV cache this release cannot serve, so the raw kind decides.
    if data.get("runtime_kind") == "upstream":
        release = upstream_releases.release(data["vllm_version"])
        if not flashinfer_fix.fp8_kv_fits(release.flashinfer, release.flashinfer_fix()):
            data |= {"kv_cache_dtype": "auto", "models": {}}  # the release serves FP16 KV only
    try:
        return load_settings(data)
    except SettingsError:
        return None  # a combination the settings refuse needs no lock


def settings_to_lock() -> Iterator[Settings]:
    for name in PROFILES:
        base = profile(name)
        if base is not None:
            yield base
        for version in upstream_releases.supported_versions():
            for build in ("wheel", "compile") if version in upstream_compile.SDISTS else ("wheel",):
                s = profile(name, runtime_kind="upstream", vllm_version=version, upstream_build=build)
                if s is not None:
                    yield s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/locks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "locks", help="where the locks go")
    parser.add_argument("--fork-tree", type=Path, help="a checkout of the fork at fork_ref (else git fetches it)")
    args = parser.parse_args(argv)
    done: set[str] = set()
    failed = []
    for s in settings_to_lock():
        for name, target in (tools_name(s), make.tools_target), (runtime_lock_name(s), None):
            if name in done:
                continue
            done.add(name)
            try:
                t = target(s) if target else make.runtime_target(s, make.source_lines(s, args.fork_tree))
                _lock, written = make.write(t, args.out, s.python_version, make.PLATFORM)
                print(f"{'wrote' if written else 'unchanged'} {t.name}: {t.what}")
            except make.LockError as err:
                failed.append(str(err))
                print(f"NOT WRITTEN: {err}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} lock(s) not written; a deploy that needs one stops and names it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
