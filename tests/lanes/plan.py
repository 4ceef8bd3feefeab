"""Which modules the lanes run and in which order: every test module outside the unit tier, longest first,
by the seconds each took in the last run (or the committed figures of a full run, for a fresh clone)."""

from __future__ import annotations

import json
from pathlib import Path

UNIT_TIER = "tests/unit"
COMMITTED = "tests/lanes/module_seconds.json"  # a full run's module times, for a clone that has not run yet
LAST_RUN = ".sandbox/module-seconds.json"  # this checkout's last lane run, written by the report


def modules(repo: Path) -> list[str]:
    """Every test module under tests/ but the unit tier, as paths relative to the repo."""
    found = (p.relative_to(repo).as_posix() for p in (repo / "tests").rglob("test_*.py"))
    return sorted(m for m in found if not m.startswith(UNIT_TIER + "/") and "/." not in m)


def seconds(repo: Path) -> dict[str, float]:
    """Known module times: the committed figures, overlaid by this checkout's last run."""
    known: dict[str, float] = {}
    for name in (COMMITTED, LAST_RUN):
        path = repo / name
        if path.is_file():
            known.update({str(k): float(v) for k, v in json.loads(path.read_text()).items()})
    return known


def order(names: list[str], known: dict[str, float]) -> list[str]:
    """Longest first, so the last module to start is a short one. A module with no time yet goes first:
    it may be long, and a long one started last is what makes a run late."""
    unknown = max(known.values(), default=0.0) + 1
    return sorted(names, key=lambda m: (-known.get(m, unknown), m))
