"""What the runtime stage reads off a host: its runtimes and links, git checkouts, the build unit, the
loaded kernel and driver, and when the service started. (Its stamps are read by vllm_rig/core/stamp.py.)

Each fact is one remote command; parsers are pure functions (tests/unit/test_runtime_facts.py)."""

from __future__ import annotations

import json
import shlex
from typing import Any, TypedDict

from vllm_rig.core.facts import SectionFact, Sections, first_line, kept_once, section_command, split_sections


class Runtime(TypedDict):
    fingerprint: str
    complete: bool  # runtime.json is there: built and checked
    rolled_back: bool
    building: bool  # its build unit is running


class Runtimes(TypedDict):
    current: str | None  # the runtime `current` names
    previous: str | None
    runtimes: dict[str, Runtime]  # every runtime under <root>/runtimes, by name


class RuntimeState(SectionFact[Runtimes]):
    """The runtimes under <root>/runtimes and the `current` and `previous` links."""

    def command(self, root: str) -> str:
        r = shlex.quote(root)
        return section_command(
            {
                "current": f"readlink {r}/current",
                "previous": f"readlink {r}/previous",
                "runtimes": (
                    f'for d in {r}/runtimes/*/; do [ -d "$d" ] || continue; n=$(basename "$d"); '
                    'printf "%s\\t%s\\t%s\\t%s\\t%s\\n" "$n" "$(cat "$d/fingerprint" 2>/dev/null)" '
                    '"$(test -f "$d/runtime.json" && echo complete)" "$(test -f "$d/rolled-back" && echo rolled-back)" '
                    '"$(systemctl is-active "vllm-rig-build-$n.service" 2>/dev/null)"; done'
                ),
            }
        )

    def parse(self, sections: Sections) -> Runtimes:
        return parse_runtime_state(sections)

    DEFAULT: Runtimes = {"current": None, "previous": None, "runtimes": {}}


def parse_runtime_state(output: list[str] | Sections) -> Runtimes:
    raw = output.raw if isinstance(output, Sections) else split_sections(output)
    runtimes: dict[str, Runtime] = {}
    for line in raw.get("runtimes", []):
        fields = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
        if fields[0]:
            runtimes[fields[0]] = {
                "fingerprint": fields[1].strip(),
                "complete": fields[2].strip() == "complete",
                "rolled_back": fields[3].strip() == "rolled-back",
                "building": fields[4].strip() in ("active", "activating"),
            }
    return {
        "current": _link_name(raw.get("current")),
        "previous": _link_name(raw.get("previous")),
        "runtimes": runtimes,
    }


def _link_name(lines: list[str] | None) -> str | None:
    target = first_line(lines)
    return target.rstrip("/").rsplit("/", 1)[-1] if target else None


class Build(TypedDict):
    complete: bool  # runtime.json is there
    unit: dict[str, str]  # the build unit's ActiveState, Result, InvocationID, ExecMainStatus, ...
    active: bool
    status: dict[str, Any]  # the build script's status.json, or {}
    others: list[str]  # other active vllm-rig-build units


class BuildState(SectionFact[Build]):
    """The build of one runtime."""

    def command(self, runtime: str, unit: str) -> str:
        d, u = shlex.quote(runtime), shlex.quote(unit)
        return section_command(
            {
                "complete": f"test -f {d}/runtime.json && echo yes",
                "unit": (
                    f"systemctl show {u} -p ActiveState -p Result -p InvocationID -p ExecMainStatus "
                    "-p ActiveEnterTimestampMonotonic 2>/dev/null"
                ),
                "status": f"cat {d}/.build/status.json 2>/dev/null",
                "others": (
                    "systemctl list-units --plain --no-legend --state=active,activating "
                    "'vllm-rig-build-*' 2>/dev/null | awk '{print $1}'"
                ),
            }
        )

    def parse(self, sections: Sections) -> Build:
        return parse_build_state(sections)

    DEFAULT: Build = {"complete": False, "unit": {}, "active": False, "status": {}, "others": []}


def built_state(runtime: str, unit: str) -> Build:
    """BuildState, read once per run when the runtime is complete (the artifact offer and the build each ask; a
    run removes only runtimes other than the ones it builds)."""
    return kept_once(BuildState, lambda found: found["complete"], runtime=runtime, unit=unit)


def parse_build_state(output: list[str] | Sections) -> Build:
    raw = output.raw if isinstance(output, Sections) else split_sections(output)
    unit = dict(line.strip().split("=", 1) for line in raw.get("unit", []) if "=" in line)
    try:
        status = json.loads("\n".join(raw.get("status", [])) or "{}")
    except ValueError:
        status = {}
    return {
        "complete": first_line(raw.get("complete")) == "yes",
        "unit": unit,
        "active": unit.get("ActiveState") in ("active", "activating", "reloading"),
        "status": status if isinstance(status, dict) else {},
        "others": sorted(line.strip() for line in raw.get("others", []) if line.strip()),
    }


class Progress(TypedDict):
    count: int  # complete lines in the log now
    lines: list[str]  # the progress lines among the new ones


class LogProgress(SectionFact[Progress]):
    """The build log after line `seen`: the progress lines among the new ones (step lines, the build's
    [n/m] lines, start and success). Counting whole lines means a line being written is never shown half,
    nor twice. The count is printed first in the one section, so both come from the same moment."""

    def command(self, path: str, seen: int) -> str:
        p = shlex.quote(path)
        return section_command(
            {
                "log": (
                    f"n=$(wc -l < {p} 2>/dev/null || echo 0); echo $n; "
                    f"awk -v a={int(seen)} -v b=\"$n\" 'NR > a && NR <= b' {p} 2>/dev/null | "
                    "grep -E '^\\s*(==> |\\[[0-9]+/[0-9]+\\] |BUILD (START|OK))' | tail -n 20"
                )
            }
        )

    def parse(self, sections: Sections) -> Progress:
        lines = sections.lines("log")
        count = lines[0].strip() if lines else "0"
        if not count.isdigit():
            sections.unreadable("the log's line count", count)
        return {"count": int(count), "lines": [x.rstrip() for x in lines[1:]]}

    DEFAULT: Progress = {"count": 0, "lines": []}


class LogTail(SectionFact[list[str]]):
    """The last `count` lines of a log (for an error report)."""

    def command(self, path: str, count: int = 25) -> str:
        return section_command({"tail": f"tail -n {int(count)} {shlex.quote(path)} 2>/dev/null"})

    def parse(self, sections: Sections) -> list[str]:
        return [line.rstrip() for line in sections.lines("tail")]

    DEFAULT: list[str] = []


class LoadedHost(SectionFact[str]):
    """ "kernel=<release> driver=<loaded nvidia module version>": what JIT caches (FlashInfer, Triton, torch
    extensions, vLLM's P2P cache) are valid for. Read when the operation runs, after any reboot of the run."""

    DEFAULT: str = "kernel=unknown driver=none"

    def command(self) -> str:
        return section_command({"kernel": "uname -r", "driver": "cat /sys/module/nvidia/version 2>/dev/null"})

    def parse(self, sections: Sections) -> str:
        return f"kernel={sections.first('kernel') or 'unknown'} driver={sections.first('driver') or 'none'}"


class Started(TypedDict):
    state: str  # the unit's ActiveState
    started: int | None  # when its main process started, epoch seconds on the host's clock; None: no process


class ServiceStart(SectionFact[Started]):
    """When the service's main process started, to compare with the stamps' times."""

    DEFAULT: Started = {"state": "unknown", "started": None}

    def command(self, service: str) -> str:
        unit = shlex.quote(f"{service}.service")
        return section_command(
            {
                "state": f"systemctl show {unit} -p ActiveState --value",
                "started": (
                    f"( pid=$(systemctl show {unit} -p MainPID --value 2>/dev/null); "
                    'if [ -n "$pid" ] && [ "$pid" != 0 ]; then '
                    'echo $(( $(date +%s) - $(ps -o etimes= -p "$pid" || echo 0) )); fi )'
                ),
            }
        )

    def parse(self, sections: Sections) -> Started:
        started = sections.first("started")
        if started is not None and not started.lstrip("-").isdigit():
            sections.unreadable("started", started)
        return {"state": sections.first("state") or "unknown", "started": int(started) if started else None}


def restart_needed(found: Started, changed: int | None) -> bool:
    """The service runs (or starts) and began before `changed`, when the runtime or its caches last changed."""
    if found["state"] not in ("active", "activating", "reloading"):
        return False
    return found["started"] is not None and changed is not None and found["started"] < changed
