"""What the front reads on each of its boxes at planning time: digests only, never the key itself."""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command

# The nginx line the front keeps per box (root only): the box's key, sent in place of the client's. The key
# goes into an nginx string, where $ starts a variable and nothing escapes it, so it must be a Bearer token
# as RFC 6750 defines one (b64token: letters, digits, - . _ ~ + / then any =); vllm-rig's keys are.
KEY_HEAD = 'proxy_set_header Authorization "Bearer '
KEY_TAIL = '";'
BEARER_TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")


def key_line(key: str) -> str:
    return f"{KEY_HEAD}{key}{KEY_TAIL}\n"


def read_key(env_file: str) -> str:
    """Shell that prints the first VLLM_API_KEY of env_file (nothing when there is none)."""
    return f"sed -n 's/^VLLM_API_KEY=//p' {shlex.quote(env_file)} 2>/dev/null | head -n1"


class BoxFilesState(TypedDict):
    ca: str | None  # sha256 of the box's CA certificate (None: not made yet)
    key: str | None  # sha256 of key_line(the box's key) (None: no key yet)
    key_ok: bool  # the key is a Bearer token (see BEARER_TOKEN)


class BoxFiles(SectionFact[BoxFilesState]):
    """A box behind a front: its CA's digest, its key line's digest, whether the key fits."""

    DEFAULT: BoxFilesState = {"ca": None, "key": None, "key_ok": False}

    def command(self, env_file: str, ca_file: str) -> str:
        head, tail = shlex.quote(KEY_HEAD), shlex.quote(KEY_TAIL)
        key = f'k=$({read_key(env_file)}); [ -n "$k" ] || exit 0'
        return section_command(
            {
                "ca": f"[ -f {shlex.quote(ca_file)} ] && sha256sum < {shlex.quote(ca_file)} | cut -d' ' -f1",
                "key": f"( {key}; printf '%s%s%s\\n' {head} \"$k\" {tail} | sha256sum | cut -d' ' -f1 )",
                "key_ok": f"( {key}; printf '%s\\n' \"$k\" | grep -Eqx '[A-Za-z0-9._~+/-]+=*' && echo yes )",
            }
        )

    def parse(self, sections: Sections) -> BoxFilesState:
        return {
            "ca": sections.first("ca"),
            "key": sections.first("key"),
            "key_ok": sections.first("key_ok") == "yes",
        }
