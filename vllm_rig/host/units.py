"""Byte counts for people, one way on the host and on the control side."""

from __future__ import annotations


def human(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units up to GiB, as `hf` and du -h count."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
