"""Run a command once per key, with all of a host's stamps read in one remote command per run.

A stamp is a small file (every one is listed in vllm_rig/paths.py STAMPS) holding the key of what was last
done: `stamped` runs its command when the key it is given differs from the stamp's, and writes the key only
after the command succeeded, so a failed run leaves the old key and the next run repeats the command, and a
changed input (a new key) runs it again.

The Stamps fact reads every stamp (key and time) with one command; the result is kept for the run and shared
by every operation that asks (`stamps()`). An operation that writes a stamp drops that copy once its commands
succeeded, so the next one reads the host again: a no-op run reads the stamps once, a run that changes
things reads them again only after a change.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from pyinfra import host, state
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.host import Host

from vllm_rig import paths
from vllm_rig.core.become import sudo_args
from vllm_rig.core.facts import SectionFact, Sections, section_command


@dataclass(frozen=True)
class Stamp:
    key: str | None = None  # None: no stamp file
    mtime: int | None = None  # when it was written, epoch seconds on the host's clock


ABSENT = Stamp()


class Stamps(SectionFact[dict[str, Stamp]]):
    """{path: Stamp} for the stamp files that exist among `files`, in one command."""

    DEFAULT: dict[str, Stamp] = {}

    def command(self, files: tuple[str, ...]) -> str:
        names = " ".join(shlex.quote(f) for f in files)
        return section_command(
            {
                "stamps": (
                    f'for f in {names}; do [ -f "$f" ] || continue; '
                    'printf "%s\\t%s\\t%s\\n" "$f" "$(stat -c %Y "$f")" "$(head -n 1 "$f")"; done'
                )
            }
        )

    def parse(self, sections: Sections) -> dict[str, Stamp]:
        return parse_stamps(sections.lines("stamps"))


def parse_stamps(output: list[str]) -> dict[str, Stamp]:
    found = {}
    for line in output:
        path, mtime, key = (line.rstrip("\n").split("\t", 2) + ["", ""])[:3]
        if path:
            found[path] = Stamp(key=key.strip(), mtime=int(mtime) if mtime.isdigit() else None)
    return found


# The stamps read this run, per host object (one per run: a new run, or a test's new State, reads again).
_read: WeakKeyDictionary[Host, dict[str, Stamp]] = WeakKeyDictionary()


def stamps() -> dict[str, Stamp]:
    """The current host's stamps: read with one command the first time a run asks, then shared."""
    box = state.inventory.get_host(host.name)
    if box not in _read:
        _read[box] = host.get_fact(Stamps, files=paths.STAMPS)
    return _read[box]


def _forget(state, host) -> None:  # noqa: ARG001 - pyinfra passes state and host by name
    """A stamp was written: the next operation that asks reads the host again."""
    _read.pop(host, None)


def write_key(stamp: str, key: str) -> str:
    """Shell that records `key` in `stamp`."""
    if "\n" in key:
        raise ValueError(f"a stamp key is one line: {key!r}")
    directory = shlex.quote(stamp.rsplit("/", 1)[0] or "/")
    return f"mkdir -p {directory} && printf '%s\\n' {shlex.quote(key)} > {shlex.quote(stamp)}"


def commands(command: str, stamp: str, key: str, streamed: bool = False) -> Iterator[object]:
    """What runs `command` and then records `key` in `stamp`: one remote command, or, when a person wants to
    watch it, the command with its output printed as it comes and then the write. The key is written only
    when the command succeeded (pyinfra stops an operation at its first failing command)."""
    if streamed:
        yield FunctionCommand(_run_streamed, (command,), {})
        yield write_key(stamp, key)
    else:
        yield f"{command} && {write_key(stamp, key)}"
    yield FunctionCommand(_forget, (), {})


Key = str | Callable[[Mapping[str, Stamp]], str]


def with_key_of(prefix: str, stamp: str) -> Callable[[Mapping[str, Stamp]], str]:
    """A key made of `prefix` and what another stamp holds when the operation runs: a proof stays valid for
    one runtime, the one the switch stamp names (a switch or a rollback earlier in the run included)."""
    return lambda found: f"{prefix}:{found.get(stamp, ABSENT).key}"


# Own operation: pyinfra has no "once per key"; server.shell with an `_if` on each stamp's FileContents would cost
# one command per stamp on every re-run, where Stamps reads them all with one.
@operation(is_idempotent=True)
def stamped(command: str, stamp: str, key: Key, streamed: bool = False):
    """Run `command` once per `key`: nothing when `stamp` already holds it. `key` may be a function of the
    host's stamps (a proof made for the runtime the switch stamp names), worked out when the operation runs."""
    found = stamps()
    want = key(found) if callable(key) else key
    if found.get(stamp, ABSENT).key == want:
        host.noop(f"{stamp} holds this key ({_short(want)})")
        return
    yield from commands(command, stamp, want, streamed)


# Own operation: server.shell prints a command's output only after it ended.
@operation(is_idempotent=False)
def streamed(command: str):
    """Run a command whose output a person wants to watch (a benchmark), printed as it comes."""
    yield FunctionCommand(_run_streamed, (command,), {})


def _run_streamed(state, host, command: str) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    ok, _ = host.run_shell_command(StringCommand(command), print_output=True, **sudo_args(host))
    return ok


def _short(key: str) -> str:
    return key if len(key) <= 60 else key[:57] + "..."
