"""systemd's reading of what vllm_rig/core/systemd_quote.py writes, for the tests: an Exec line split into
argv words, an environment file's pairs (systemd's own rules, so a test can say what the server receives)."""

from __future__ import annotations

from vllm_rig.core.systemd_quote import ENV_SPECIAL

_C_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def unquote_words(line: str) -> list[str]:
    """Split an Exec line as systemd does (quotes, escapes, %%, $$)."""
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


def parse_env_file(text: str) -> list[tuple[str, str]]:
    """The pairs of env_file_text's lines (double-quoted values, # comments)."""
    pairs = []
    for line in text.splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        name, _, rest = line.partition("=")
        if not (rest.startswith('"') and rest.endswith('"') and len(rest) >= 2):
            raise ValueError(f"not a quoted value: {line!r}")
        body, value, i = rest[1:-1], [], 0
        while i < len(body):
            if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in ENV_SPECIAL:
                value.append(body[i + 1])
                i += 2
            elif body[i] == '"':
                raise ValueError(f"an unescaped quote ends the value early: {line!r}")
            else:
                value.append(body[i])
                i += 1
        pairs.append((name, "".join(value)))
    return pairs
