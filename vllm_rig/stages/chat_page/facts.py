"""What the chat page stage reads on the host, each in one short command; none of them ever prints a key."""

from __future__ import annotations

import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command


class VenvState(TypedDict):
    complete: bool  # the venv for this key is built (its stamp written last)
    current: str | None  # where the unit's venv link points


class ChatVenv(SectionFact[VenvState]):
    DEFAULT: VenvState = {"complete": False, "current": None}

    def command(self, stamp: str, key: str, link: str) -> str:
        return section_command(
            {
                "complete": f'[ "$(cat {shlex.quote(stamp)} 2>/dev/null)" = {shlex.quote(key)} ] && echo yes',
                "current": f"readlink {shlex.quote(link)} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> VenvState:
        return {"complete": sections.first("complete") == "yes", "current": sections.first("current")}


def key_value_script(key_file: str) -> str:
    """Shell that prints the page's own key (the bare key lan_keys wrote in key_file, root only), for a $( ) only:
    it goes from file to variable to file, never onto a command line. Nothing when the file is gone (bin/rig keys
    revoke) or holds what is no Bearer token (lan_keys's TOKEN: such a file is left out of nginx's map too)."""
    return (
        f"k=$(head -n1 {shlex.quote(key_file)} 2>/dev/null || true); "
        'case "$k" in "" | *[!A-Za-z0-9._~+/=-]*) k= ;; esac; printf "%s" "$k"'
    )


class ChatEnv(SectionFact[str]):
    """ "same" when the page's env file holds the page's key as it is on the box (none when revoked) and a session
    secret, mode 600; else "differs"."""

    DEFAULT: str = "differs"

    def command(self, key_file: str, env_file: str) -> str:
        f = shlex.quote(env_file)
        script = (
            f"want=$({key_value_script(key_file)}); "
            f'have=$(sed -n "s/^OPENAI_API_KEYS=//p" {f} 2>/dev/null | head -n1); '
            f'secret=$(sed -n "s/^WEBUI_SECRET_KEY=//p" {f} 2>/dev/null | head -n1); '
            f'if [ "$(stat -c %a {f} 2>/dev/null)" = 600 ] && [ "$have" = "$want" ] && [ -n "$secret" ]; '
            "then echo same; else echo differs; fi"
        )
        return section_command({"env": f"( {script} )"})

    def parse(self, sections: Sections) -> str:
        state = sections.required("env")
        if state not in ("same", "differs"):
            sections.unreadable("env", state)
        return state
