"""What a lane run prints at the end: the failed modules' output, the totals, the slowest ten tests and every
module's time (so growth is seen when it happens), from the JUnit files the sessions wrote."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from tests.lanes.schedule import Result

TAIL_LINES = 200  # of a failed module's log


@dataclass(frozen=True)
class Case:
    nodeid: str
    seconds: float
    outcome: str  # passed, failed, error, skipped


def cases(junit: Path) -> list[Case]:
    """The test cases of one pytest JUnit file (missing or unreadable: none; the module's exit code says why)."""
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return []
    found = []
    for case in tree.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        found.append(Case(f"{module}.py::{case.get('name')}", float(case.get("time") or 0), outcome))
    return found


def totals(all_cases: list[Case]) -> dict[str, int]:
    counts = {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for case in all_cases:
        counts[case.outcome] += 1
    return counts


def slowest(all_cases: list[Case], n: int = 10) -> list[Case]:
    return sorted(all_cases, key=lambda c: -c.seconds)[:n]


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def summary(results: list[Result], unit_cases: list[Case], wall_s: float) -> list[str]:
    lines: list[str] = []
    for r in sorted(results, key=lambda r: r.module):
        if not r.ok:
            lines.append(f"==== {r.module} (lane {r.lane}) FAILED, the last {TAIL_LINES} lines of {r.log} ====")
            lines.append(tail(r.log))
    all_cases = unit_cases + [c for r in results for c in cases(r.junit)]
    count = totals(all_cases)
    lines.append("==== slowest 10 tests (every tier, every lane) ====")
    lines += [f"{c.seconds:8.1f} s  {c.nodeid}" for c in slowest(all_cases)]
    lines.append("==== modules, longest first (lane, seconds) ====")
    lines += [f"{r.seconds:8.0f} s  [{r.lane}] {r.module}" for r in sorted(results, key=lambda r: -r.seconds)]
    busy = {lane: sum(r.seconds for r in results if r.lane == lane) for lane in sorted({r.lane for r in results})}
    lines.append("lanes busy: " + ", ".join(f"lane {lane} {s / 60:.1f} min" for lane, s in busy.items()))
    failed = [r.module for r in results if not r.ok]
    lines.append(
        f"lanes: {count['passed']} passed, {count['failure']} failed, {count['error']} errors, "
        f"{count['skipped']} skipped; {len(results)} modules, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f"; wall {wall_s / 60:.1f} min"
    )
    return lines


def record(results: list[Result], path: Path) -> None:
    """This run's module times, for the next run's order (plan.LAST_RUN)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    times = {r.module: round(r.seconds, 1) for r in sorted(results, key=lambda r: r.module)}
    path.write_text(json.dumps(times, indent=1) + "\n")
