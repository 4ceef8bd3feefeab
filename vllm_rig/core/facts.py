"""Building blocks for facts: one remote command per fact, sections marked by `@@name` lines.

pyinfra's own facts are read wherever one gives what a stage needs (FileContents for a file's text or the boot
id, DebPackages, Users in a removal). A SectionFact reads what no stock fact does: the GPUs and the link, the
host programs' answers, the model's and the runtime's state, or several things in the one command a re-run
can afford (pyinfra's facts are one command each, and 3.x keeps none of them across operations).

`SectionFact` is the base every fact of the rig uses. A fact:

    class CpuCount(SectionFact[int]):
        DEFAULT = 0  # what callers get back when the host failed on this fact (or pyinfra skipped it)

        def command(self, path: str) -> str:  # the fact's arguments, as pyinfra passes them
            return section_command({"cpus": "nproc", "disk": f"df -P -B1 {shlex.quote(path)}"})

        def parse(self, sections: Sections) -> int:
            return sections.integer("cpus")  # a typed value: a dataclass, a TypedDict, a str...

`section_command` makes the one shell command: `echo @@name` before each snippet, each snippet's failure
contained (`{ snippet; } || true`), so a missing tool is data for the parser and the command exits 0. A
snippet must not `exit` (the sections after it would be missing) nor lean on another's variables: put it
in `( ... )` where it sets variables or may exit.
`process()` (pyinfra's hook) splits the output into `Sections` and calls `parse`. Whatever `parse` cannot
read (`Sections.unreadable`, or a ValueError/IndexError/KeyError/TypeError from a parser) fails that
host with ONE line, e.g. `rig2: NvidiaGpus could not read pcie.link.width.current '[N/A]'`, never a
traceback, and the other hosts go on:

- the host is marked failed (the run exits non-zero; `core.run.host_failed()` is then true, so later
  stages plan nothing for it) and leaves pyinfra's active hosts (no later operation runs on it);
- while the run is planned, `FactUnreadable` is raised: the stage entry (`context.run_stage`) stops
  planning that host's stage there; while it executes (an `_if=` lambda, an operation's body), `default()`
  comes back instead, since pyinfra lets no exception out of an operation without a traceback;
- outside a pyinfra run (unit tests call `process()` directly) `FactUnreadable` is raised, with the line.

pyinfra itself would fail the host only on `FactProcessError` and print two lines for it; any other
exception in `process()` aborts every host of the run with a traceback (pyinfra/api/facts.py, 3.10).
pyinfra calls `process()` only when the command printed something: with no output at all (the command
never ran) callers get `default()` too, so every subclass sets DEFAULT (checked when it is defined).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable, Mapping
from typing import Any, Generic, NoReturn, TypeVar
from weakref import WeakKeyDictionary

from pyinfra import logger
from pyinfra.api import FactBase
from pyinfra.context import ctx_host, ctx_state

T = TypeVar("T")

# What a parser raises on output it cannot read; every fact answers it with one line for the host.
PARSE_ERRORS = (ValueError, IndexError, KeyError, TypeError)


class FactUnreadable(Exception):
    """A fact could not read its host's output; `str()` is the one line (host, fact, what)."""


class CannotRead(ValueError):
    """Raised by a parser: `what` it could not read (a field name and the value seen)."""


def split_sections(output: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output:
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line)
    return sections


def first_line(lines: list[str] | None) -> str | None:
    return next((line.strip() for line in lines or [] if line.strip()), None)


def section_command(sections: Mapping[str, str]) -> str:
    """One shell command for all `sections` (name -> snippet): `echo @@name` before each snippet's output.
    `|| true` contains each snippet's failure: the command always exits 0 (pyinfra fails a host whose fact
    command exits non-zero) and a missing tool is data for the parser."""
    for name in sections:
        if not name or any(c.isspace() for c in name) or name.startswith("@"):
            raise ValueError(f"section name {name!r}: one word, no leading @")
    script = "; ".join(f"echo @@{name}; {{ {snippet}; }} || true" for name, snippet in sections.items())
    return "sh -c " + shlex.quote(script)


class Sections:
    """A fact's output split at its `@@name` lines; reads that fail say which section and what they saw."""

    def __init__(self, raw: dict[str, list[str]]) -> None:
        self.raw = raw

    def __contains__(self, name: str) -> bool:
        return name in self.raw

    def lines(self, name: str) -> list[str]:
        """The section's lines ([] when it printed nothing)."""
        return self.raw.get(name, [])

    def words(self, name: str) -> list[str]:
        """The section's non-blank lines, stripped."""
        return [line.strip() for line in self.raw.get(name, []) if line.strip()]

    def first(self, name: str) -> str | None:
        """The section's first non-blank line, stripped; None when there is none."""
        return first_line(self.raw.get(name))

    def text(self, name: str) -> str:
        return "\n".join(self.raw.get(name, []))

    def required(self, name: str) -> str:
        """The first non-blank line, which must be there."""
        value = self.first(name)
        if value is None:
            self.unreadable(name, "" if name in self.raw else None)
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        """The first line as an int; `default` when the section printed nothing (when given)."""
        value = self.first(name)
        if value is None and default is not None:
            return default
        try:
            return int(value or "")
        except ValueError:
            self.unreadable(name, value)

    @staticmethod
    def unreadable(what: str, value: str | None = None) -> NoReturn:
        """Stop parsing: `what` could not be read (its value quoted, or "missing" when there was none)."""
        raise CannotRead(f"{what} {value!r}" if value is not None else f"{what} (missing)")


class SectionFact(FactBase[T], Generic[T]):
    """A fact read with one `section_command` and parsed by `parse`; see the module's docstring. Every
    subclass says its DEFAULT: a failed host's callers get a copy of it while the run executes."""

    DEFAULT: T

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if not hasattr(cls, "DEFAULT") and "default" not in vars(cls):
            raise TypeError(f"{cls.__name__}: a SectionFact sets DEFAULT, what a failed host's callers get")

    @classmethod
    def default(cls) -> T:  # a copy: a caller may change what it got
        return copy.deepcopy(cls.DEFAULT)

    def parse(self, sections: Sections) -> T:
        raise NotImplementedError

    def process(self, output: list[str]) -> T:
        try:
            return self.parse(Sections(split_sections(output)))
        except CannotRead as err:
            what = str(err)
        except PARSE_ERRORS as err:
            what = f"its output ({type(err).__name__}: {err})"
        return fail_host(type(self).__name__, what, self.default())


def fail_host(fact: str, what: str, default: T) -> T:
    """One line for this host; the host failed and out of the run; raise while planning, `default` while
    executing (see the module's docstring)."""
    if not (ctx_host.isset() and ctx_state.isset()):
        raise FactUnreadable(f"{fact} could not read {what}")
    host, state = ctx_host.get(), ctx_state.get()
    line = f"{host.name}: {fact} could not read {what}"
    logger.error(line)
    state.failed_hosts.add(host)
    state.active_hosts.discard(host)
    if state.is_executing:
        return default
    raise FactUnreadable(line)


# What kept_once kept, per host (one Host object per run) and fact with its arguments.
_kept: WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = WeakKeyDictionary()


def kept_once(fact: type[FactBase[T]], settled: Callable[[T], bool], **args: Any) -> T:
    """The current host's `fact`, read again on each call until `settled` says the answer can no longer change in
    this run (a complete download, a built runtime), then kept for the rest of the run: pyinfra 3 keeps no fact
    across operations, and several stages ask the same question of a finished thing."""
    host = ctx_host.get()
    known = _kept.setdefault(host, {})
    key = (fact, *sorted(args.items()))
    if key in known:
        return known[key]
    found = host.get_fact(fact, **args)
    if settled(found):
        known[key] = found
    return found
