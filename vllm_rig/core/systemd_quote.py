"""Quote command-line words for a systemd unit's Exec*= lines.

systemd splits on whitespace, honours double quotes with C-style backslash escapes, expands `%`
specifiers and `$VAR` / `${VAR}` environment references. A JSON flag value holds quotes, `$`-free text
today, but a user's sampling override or chat template kwargs may hold anything: every word is quoted
so it reaches the server exactly as written.
"""

from __future__ import annotations

import re

SAFE = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")


def quote_word(word: str) -> str:
    """One argv word as systemd will give it back: specifiers and variables neutralised, quoted if needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if SAFE.match(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
                word.append(line[i + 1])
                i += 2
                continue
            word.append(ch)
            i += 1
        words.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return words
