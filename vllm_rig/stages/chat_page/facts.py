"""What the chat page stage reads on the host, each in one short command; none of them ever prints a key."""

from __future__ import annotations

import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.stages.lan.facts import api_key_script


class VenvState(TypedDict):
    complete: bool  # the venv for this key is built (its stamp written last)
    current: str | None  # where the unit's venv link points


class ChatVenv(SectionFact[VenvState]):
    @staticmethod
    def default() -> VenvState:
        return {"complete": False, "current": None}

    def command(self, stamp: str, key: str, link: str) -> str:
        return section_command(
            {
                "complete": f'[ "$(cat {shlex.quote(stamp)} 2>/dev/null)" = {shlex.quote(key)} ] && echo yes',
                "current": f"readlink {shlex.quote(link)} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> VenvState:
        return {"complete": sections.first("complete") == "yes", "current": sections.first("current")}


def key_value_script(server_env: str) -> str:
    """Shell that prints the server's key (from its root-only env file, read as the LAN proxy reads it), for a
    $( ) only: it goes from file to variable to file, never onto a command line."""
    return f'{api_key_script(server_env)}; printf "%s" "$k"'


class ChatEnv(SectionFact[str]):
    """ "same" when the page's env file holds the server's key and a session secret (mode 600), "differs",
    or "nokey" (the server has none yet)."""

    @staticmethod
    def default() -> str:
        return "differs"

    def command(self, server_env: str, env_file: str) -> str:
        f = shlex.quote(env_file)
        script = (
            f"want=$({key_value_script(server_env)}); "
            '[ -n "$want" ] || { echo nokey; exit 0; }; '
            f'have=$(sed -n "s/^OPENAI_API_KEYS=//p" {f} 2>/dev/null | head -n1); '
            f'secret=$(sed -n "s/^WEBUI_SECRET_KEY=//p" {f} 2>/dev/null | head -n1); '
            f'if [ "$(stat -c %a {f} 2>/dev/null)" = 600 ] && [ "$have" = "$want" ] && [ -n "$secret" ]; '
            "then echo same; else echo differs; fi"
        )
        return section_command({"env": f"( {script} )"})

    def parse(self, sections: Sections) -> str:
        state = sections.required("env")
        if state not in ("same", "differs", "nokey"):
            sections.unreadable("env", state)
        return state
