"""Quote command-line words for a systemd unit's Exec*= lines.

systemd splits on whitespace, honours double quotes with C-style backslash escapes, expands `%`
specifiers and `$VAR` / `${VAR}` environment references. A JSON flag value holds quotes, `$`-free text
today, but a user's sampling override or chat template kwargs may hold anything: every word is quoted
so it reaches the server exactly as written. A control character (settings refuse them; this is the second
line of defence) is written as a C escape inside quotes, which systemd unescapes: a line break can never end
the directive and start another.

Environment values do not go into the unit (every user of the box can read it): env_file_text writes them in
systemd's environment-file syntax for a root-only EnvironmentFile=, parse_env_file reads that back.
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
_C_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _escape(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch


def unquote_words(line: str) -> list[str]:
    """The inverse, for tests and checks: split an Exec line as systemd does (quotes, escapes, %%, $$)."""
    words: list[str] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            break
        word, quoted = [], line[i] == '"'
        i += 1 if quoted else 0
        while i < n and (quoted or not line[i].isspace()):
            ch = line[i]
            if quoted and ch == '"':
                i += 1
                break
            if ch == "\\" and i + 1 < n:
                nxt = line[i + 1]
                if nxt == "x" and i + 3 < n:
                    word.append(chr(int(line[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                word.append(_C_UNESCAPES.get(nxt, nxt))
                i += 2
                continue
            word.append(ch)
            i += 1
        words.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return words


# Inside double quotes systemd's environment-file parser takes a backslash before one of these as that
# character; nothing else is special there (no specifiers, no variable expansion).
_ENV_SPECIAL = '"\\`$'


def env_file_text(pairs: list[tuple[str, str]]) -> str:
    """NAME="value" lines systemd's EnvironmentFile= reads back as exactly these pairs (one line each: a
    control character is refused, since settings never hold one)."""
    lines = []
    for name, value in pairs:
        if not name.isidentifier() or not name.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError(f"{name!r}: not one line NAME=value")
        quoted = "".join("\\" + c if c in _ENV_SPECIAL else c for c in value)
        lines.append(f'{name}="{quoted}"')
    return "".join(line + "\n" for line in lines)


def parse_env_file(text: str) -> list[tuple[str, str]]:
    """The inverse, for tests: the pairs of env_file_text's lines (double-quoted values, # comments)."""
    pairs = []
    for line in text.splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        name, _, rest = line.partition("=")
        if not (rest.startswith('"') and rest.endswith('"') and len(rest) >= 2):
            raise ValueError(f"not a quoted value: {line!r}")
        body, value, i = rest[1:-1], [], 0
        while i < len(body):
            if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in _ENV_SPECIAL:
                value.append(body[i + 1])
                i += 2
            elif body[i] == '"':
                raise ValueError(f"an unescaped quote ends the value early: {line!r}")
            else:
                value.append(body[i])
                i += 1
        pairs.append((name, "".join(value)))
    return pairs
