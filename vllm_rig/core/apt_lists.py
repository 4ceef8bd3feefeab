"""What apt's package lists know, and how old they are, in one command.

`apt-cache policy NAME...` prints a block per name apt knows (unknown names print nothing on stdout);
its `Candidate:` line is what an install would get. The age is the newest of the refresh stamps:
the one vllm-rig writes after its own `apt-get update`, apt's update-success-stamp (apt-daily writes
it), and the lists directory itself (apt moves new lists into it). List files keep the server's
Last-Modified time, so their own mtimes say nothing about the last refresh.
"""

from __future__ import annotations

import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.paths import APT_LISTS_STAMP

LISTS_STAMP = APT_LISTS_STAMP
REFRESH_MARKS = (LISTS_STAMP, "/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")


class Policy(TypedDict):
    installed: str | None
    candidate: str | None


class ListsState(TypedDict):
    age_s: int | None  # seconds since the newest refresh mark; None: never refreshed
    packages: dict[str, Policy]


def parse_policy(lines: list[str]) -> dict[str, Policy]:
    """name -> {"installed": version or None, "candidate": version or None} from `apt-cache policy`."""
    out: dict[str, Policy] = {}
    current = None
    for line in lines:
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = out.setdefault(line.rstrip()[:-1].split(":")[0], {"installed": None, "candidate": None})
            continue
        key, sep, value = line.strip().partition(": ")
        version = None if value.strip() == "(none)" else value.strip()
        if current is not None and sep and key == "Installed":
            current["installed"] = version
        elif current is not None and sep and key == "Candidate":
            current["candidate"] = version
    return out


class AptLists(SectionFact[ListsState]):
    """How old the package lists are and what they say of `packages`."""

    DEFAULT: ListsState = {"age_s": None, "packages": {}}

    def command(self, packages: tuple[str, ...]) -> str:
        marks = " ".join(shlex.quote(m) for m in REFRESH_MARKS)
        return section_command(
            {
                "age": (
                    "now=$(date +%s); t=; "
                    f'for f in {marks}; do [ -e "$f" ] || continue; m=$(stat -c %Y "$f"); '
                    '[ -z "$t" ] || [ "$m" -gt "$t" ] && t=$m; done; [ -n "$t" ] && echo $((now - t))'
                ),
                "policy": f"apt-cache policy {shlex.join(packages)} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> ListsState:
        age = sections.first("age")
        if age is not None and not age.lstrip("-").isdigit():
            sections.unreadable("age", age)
        return {"age_s": int(age) if age is not None else None, "packages": parse_policy(sections.lines("policy"))}


def refresh_reason(found: ListsState, packages: tuple[str, ...], max_age_s: int) -> str | None:
    """Why the lists need `apt-get update` before these packages are installed, or None."""
    known = found["packages"]
    missing = [p for p in packages if not (p in known and (known[p]["installed"] or known[p]["candidate"]))]
    if missing:
        return f"not in the package lists: {', '.join(missing)}"
    age = found["age_s"]
    if age is None:
        return "the package lists were never refreshed"
    if age > max_age_s:
        return f"the package lists are {age // 3600} h old"
    return None
