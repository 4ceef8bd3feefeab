"""When the requests per key were last read, per host, kept on the control machine (as status keeps its last
read): bin/rig keys list and bin/rig status count the requests since then and move the mark. The mark is the
box's own clock, as the box reported it, so the two clocks never need to agree."""

from __future__ import annotations

import json
from pathlib import Path

READS = Path("bench-results") / "keys"


def last_read(host_name: str) -> float:
    """The box's time at the last read; 0 (the log's start) when there was none."""
    try:
        return float(json.loads((READS / f"{host_name}.json").read_text())["read_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def mark_read(host_name: str, box_time: float) -> None:
    READS.mkdir(parents=True, exist_ok=True)
    (READS / f"{host_name}.json").write_text(json.dumps({"read_at": box_time}) + "\n")
