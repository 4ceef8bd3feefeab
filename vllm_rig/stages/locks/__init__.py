"""The hashed install locks: every pip install on a box installs one of these files with `--require-hashes`
(and `--no-deps`: a lock is the whole closure), so an index, a mirror or anyone on the way that serves other
bytes under the same name and version is refused by pip before anything is installed.

One lock per runtime build (the upstream kind's release wheel per vLLM release, its compile per release and torch
lane, the fork per commit and torch lane) and one for the tools venv, each for one Python. They are data files under
`locks_dir` (the project's locks/ by default), written by `bin/locks` from the real resolver
(uv pip compile --generate-hashes), or by the deploy itself the first time a host needs one that is not there
(first_use.py); this module only finds and reads them on the control machine.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_rig.settings import Settings

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DIR = "locks"
COMMAND = "bin/locks"
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)")


class LockMissing(Exception):
    """No lock for these settings, or one that is not fully hashed: the one line says which and what to run."""


@dataclass(frozen=True)
class Lock:
    name: str  # the file's name under locks_dir
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def directory(s: Settings) -> Path:
    """locks_dir on the control machine; a relative one is taken from the project's root."""
    path = Path(s.locks_dir)
    return path if path.is_absolute() else REPO / path


def tools_name(s: Settings) -> str:
    return f"tools-py{s.python_version}.txt"


def entries(text: str) -> dict[str, str]:
    """Normalized name -> version of each locked requirement."""
    found = {}
    for line in text.splitlines():
        match = ENTRY.match(line)
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)
    return found


def unhashed(text: str) -> list[str]:
    """The requirement lines of a lock that carry no --hash (pip would refuse the whole file)."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text)
    return [b.split()[0] for b in blocks if ENTRY.match(b) and "--hash=sha256:" not in b]


def read(s: Settings, name: str, what: str) -> Lock:
    """The named lock, fully hashed; LockMissing with the one line otherwise."""
    path = directory(s) / name
    if not path.is_file():
        raise LockMissing(
            f"locks_dir: no hashed lock for {what} ({path}): a deploy writes it on first use, or run `{COMMAND}` "
            "where its index is reachable"
        )
    text = path.read_text()
    bare = unhashed(text)
    if bare or not entries(text):
        said = f"{', '.join(bare[:3])} without --hash" if bare else "no locked requirement"
        raise LockMissing(f"locks_dir: {path} has {said}: run `{COMMAND}` to write it again")
    return Lock(name, text)


def tools_what(s: Settings) -> str:
    return f"the tools venv on Python {s.python_version}"


def tools_lock(s: Settings) -> Lock:
    return read(s, tools_name(s), tools_what(s))
