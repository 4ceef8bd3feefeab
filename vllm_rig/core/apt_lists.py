"""What apt's package lists know, and how old they are, in one command.

`apt-cache policy NAME...` prints a block per name apt knows (unknown names print nothing on stdout);
its `Candidate:` line is what an install would get. The age is the newest of the refresh stamps:
the one vllm-rig writes after its own `apt-get update`, apt's update-success-stamp (apt-daily writes
it), and the lists directory itself (apt moves new lists into it). List files keep the server's
Last-Modified time, so their own mtimes say nothing about the last refresh.
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections
from vllm_rig.paths import APT_LISTS_STAMP

LISTS_STAMP = APT_LISTS_STAMP
REFRESH_MARKS = (LISTS_STAMP, "/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")


def parse_policy(lines: list[str]) -> dict[str, dict[str, str | None]]:
    """name -> {"installed": version or None, "candidate": version or None} from `apt-cache policy`."""
    out: dict[str, dict[str, str | None]] = {}
    current = None
    for line in lines:
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = out.setdefault(line.rstrip()[:-1].split(":")[0], {"installed": None, "candidate": None})
            continue
        key, sep, value = line.strip().partition(": ")
        if current is not None and sep and key in ("Installed", "Candidate"):
            current[key.lower()] = None if value.strip() == "(none)" else value.strip()
    return out


class AptLists(FactBase):
    """{"age_s": seconds since the newest refresh mark (None: never), "packages": parse_policy(...)}."""

    def command(self, packages: tuple[str, ...]) -> str:
        marks = " ".join(shlex.quote(m) for m in REFRESH_MARKS)
        script = (
            "echo @@age; now=$(date +%s); t=; "
            f'for f in {marks}; do [ -e "$f" ] || continue; m=$(stat -c %Y "$f"); '
            '[ -z "$t" ] || [ "$m" -gt "$t" ] && t=$m; done; [ -n "$t" ] && echo $((now - t)); '
            f"echo @@policy; apt-cache policy {shlex.join(packages)} 2>/dev/null || true"
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict[str, Any]:
        raw = split_sections(output)
        age = next((line.strip() for line in raw.get("age", []) if line.strip().lstrip("-").isdigit()), None)
        return {"age_s": int(age) if age is not None else None, "packages": parse_policy(raw.get("policy", []))}


def refresh_reason(found: dict[str, Any], packages: tuple[str, ...], max_age_s: int) -> str | None:
    """Why the lists need `apt-get update` before these packages are installed, or None."""
    known = found["packages"]
    missing = [
        p for p in packages if not (known.get(p) or {}).get("installed") and not (known.get(p) or {}).get("candidate")
    ]
    if missing:
        return f"not in the package lists: {', '.join(missing)}"
    if found["age_s"] is None:
        return "the package lists were never refreshed"
    if found["age_s"] > max_age_s:
        return f"the package lists are {found['age_s'] // 3600} h old"
    return None
