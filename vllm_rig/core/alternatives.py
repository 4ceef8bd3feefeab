"""Pin a Debian alternative (e.g. /usr/local/cuda) so installing another toolkit cannot flip it."""

from __future__ import annotations

import shlex
from typing import TypedDict

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import SectionFact, Sections, section_command


class AlternativeState(TypedDict):
    mode: str | None  # "auto" or "manual"; None when dpkg knows no such alternative
    target: str | None  # where /etc/alternatives/<link> points


class Alternative(SectionFact[AlternativeState]):
    """An alternative's mode and target, in one command."""

    DEFAULT: AlternativeState = {"mode": None, "target": None}

    def command(self, link: str) -> str:  # ("name" is reserved by pyinfra for operation names)
        q = shlex.quote(link)
        return section_command(
            {"mode": f"head -1 /var/lib/dpkg/alternatives/{q} 2>/dev/null", "target": f"readlink /etc/alternatives/{q}"}
        )

    def parse(self, sections: Sections) -> AlternativeState:
        return {"mode": sections.first("mode"), "target": sections.first("target")}


# Own operation: pyinfra has no operation or fact for Debian's alternatives.
@operation()
def alternative(link_name: str, path: str):
    """`update-alternatives --set` unless the alternative is already manual and pointing at `path`
    (auto mode would let any newer cuda-* package take /usr/local/cuda over)."""
    found = host.get_fact(Alternative, link=link_name)
    if found == {"mode": "manual", "target": path}:
        host.noop(f"{link_name} -> {path} (manual)")
        return
    yield f"update-alternatives --set {shlex.quote(link_name)} {shlex.quote(path)}"
