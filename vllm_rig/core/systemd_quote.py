"""Quote command-line words for a systemd unit's Exec*= lines.

systemd splits on whitespace, honours double quotes with C-style backslash escapes, expands `%`
specifiers and `$VAR` / `${VAR}` environment references. A JSON flag value holds quotes, `$`-free text
today, but a user's sampling override or chat template kwargs may hold anything: every word is quoted
so it reaches the server exactly as written. A control character (settings refuse them; this is the second
line of defence) is written as a C escape inside quotes, which systemd unescapes: a line break can never end
the directive and start another.

Environment values do not go into the unit (every user of the box can read it): env_file_text writes them in
systemd's environment-file syntax for a root-only EnvironmentFile= (tests/systemd_split.py reads both back).
"""

from __future__ import annotations

import re

SAFE = re.compile(r"[A-Za-z0-9_./:=,+@-]+")


def quote_word(word: str) -> str:
    """One argv word as systemd will give it back: specifiers and variables neutralised, quoted if needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if SAFE.fullmatch(escaped):  # not match: its $ would let a trailing line break through
        return escaped
    return '"' + "".join(_C_ESCAPES.get(ch) or _escape(ch) for ch in escaped) + '"'


_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch


# Inside double quotes systemd's environment-file parser takes a backslash before one of these as that
# character; nothing else is special there (no specifiers, no variable expansion).
ENV_SPECIAL = '"\\`$'


def env_file_text(pairs: list[tuple[str, str]]) -> str:
    """NAME="value" lines systemd's EnvironmentFile= reads back as exactly these pairs (one line each: a
    control character is refused, since settings never hold one)."""
    lines = []
    for name, value in pairs:
        if not name.isidentifier() or not name.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError(f"{name!r}: not one line NAME=value")
        quoted = "".join("\\" + c if c in ENV_SPECIAL else c for c in value)
        lines.append(f'{name}="{quoted}"')
    return "".join(line + "\n" for line in lines)
