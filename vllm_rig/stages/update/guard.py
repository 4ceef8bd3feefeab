"""The guarded update's decision as pure functions: a new runtime replaces the running one only when, at every
benchmark size, its decode and prefill are at most `margin_pct` percent below the running one's."""

from __future__ import annotations

from typing import Any

GUARDED = (("decode_tps", "decode"), ("prefill_tps", "prefill"))


def worse(before: dict[str, Any], after: dict[str, Any], margin_pct: float) -> list[str]:
    """What makes `after` (bench.py JSON of the new runtime) worse than `before` (the running one); [] if nothing."""
    problems: list[str] = []
    floor = 1 - margin_pct / 100
    for size, old in before.get("summary", {}).items():
        new = after.get("summary", {}).get(size)
        if new is None:
            problems.append(f"{size}: not measured on the new runtime")
            continue
        for key, name in GUARDED:
            a, b = old.get(key), new.get(key)
            if a is None or b is None:
                problems.append(f"{size} {name}: not measured on {'the running' if a is None else 'the new'} runtime")
            elif b < a * floor:
                problems.append(
                    f"{size} {name} {b:,.1f} tok/s is {100 * (a - b) / a:.1f}% below {a:,.1f} "
                    f"(fork_update_margin_pct={margin_pct:g})"
                )
    if not before.get("summary"):
        problems.append("the running runtime's benchmark has no results")
    return problems
