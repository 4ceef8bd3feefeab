"""Trust on first use, as a Cargo.lock is written by the first build: a lock a host's settings need and locks_dir
lacks (a fork commit, a compile on the PyTorch index: their sources are not reachable where the project's locks
are made) is written on the control machine by the same tool as `bin/locks`, before any host is touched, said in
one loud line and kept. From then on every box installs exactly its files; a deploy never rewrites a lock that is
there (only `bin/locks` does), so a later index that serves other bytes is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_rig.host.runtime_build import redact
from vllm_rig.settings import Settings
from vllm_rig.stages import locks
from vllm_rig.stages.locks import make
from vllm_rig.stages.runtime import kinds, plan


@dataclass
class Outcome:
    written: list[str] = field(default_factory=list)  # one loud line per lock written on first use
    problems: list[str] = field(default_factory=list)  # one line per host and lock it still lacks


def index_names(s: Settings, t: make.Target) -> str:
    """The indexes a lock came from, as an owner names them (credentials in a URL redacted)."""
    main = "PyPI" if s.pip_index_url is None else redact(t.index)
    return f"{main} and {redact(t.extra_index)}" if t.extra_index else main


def _target(s: Settings, name: str) -> make.Target:
    if name == locks.tools_name(s):
        return make.tools_target(s)
    return make.runtime_target(s, make.source_lines(s))


def _write(s: Settings, name: str) -> str:
    """Write the lock `name` for `s`: the loud line; make.LockError when its sources or index cannot be reached."""
    t = _target(s, name)
    make.write(t, locks.directory(s), s.python_version, make.PLATFORM)
    shown = Path(s.locks_dir) / name
    return f"wrote {shown} from {index_names(s, t)} on first use; every box now installs exactly these files; commit it"


def ensure(hosts: Mapping[str, Settings]) -> Outcome:
    """Every lock the hosts need: kept where it is, written where it is missing, a line where neither works."""
    out = Outcome()
    failed: dict[Path, str] = {}  # a lock one host could not get is not tried again for the next
    for host, s in hosts.items():
        for name, what in (
            (locks.tools_name(s), locks.tools_what(s)),
            (plan.runtime_lock_name(s), kinds.of(s).lock_what(s)),
        ):
            path = locks.directory(s) / name
            if not path.exists() and path not in failed:
                try:
                    out.written.append(_write(s, name))
                except (make.LockError, OSError) as err:  # OSError: git missing here, locks_dir not writable
                    failed[path] = f"locks_dir: no hashed lock for {what} ({path}), and none could be written: {err}"
            if path in failed:
                out.problems.append(f"[{host}] {failed[path]}")
                continue
            try:
                locks.read(s, name, what)  # there: used as it is (an unhashed one is said, never rewritten here)
            except locks.LockMissing as err:
                out.problems.append(f"[{host}] {err}")
    return out
