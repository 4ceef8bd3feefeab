"""The client keys as lan_keys lists them: names, when made, requests since a time (never a key)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.stages.lan.facts import lan_keys


def listing_command(package: str, keys_dir: str, log: str, since: float) -> str:
    """The shell command that prints lan_keys's listing JSON (nothing when the host programs are not there)."""
    listing = lan_keys(package, "list", "--dir", keys_dir, "--log", log, "--since", repr(float(since)))
    return f"if [ -f {shlex.quote(package)} ]; then {listing}; fi"


class KeyListing(SectionFact[dict[str, Any]]):
    """lan_keys list's JSON: {"now", "since", "keys": {name: {"made", "requests"}}, "server", "without_key",
    "revoked"}; {} when the host programs are not installed."""

    DEFAULT: dict[str, Any] = {}

    def command(self, package: str, keys_dir: str, log: str, since: float) -> str:
        return section_command({"list": listing_command(package, keys_dir, log, since)})

    def parse(self, sections: Sections) -> dict[str, Any]:
        text = sections.first("list")
        if not text:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            sections.unreadable("list", text)
        return data if isinstance(data, dict) else {}
