"""Values that must never reach pyinfra's output: operation arguments are recorded with str(), and at -vv a fact
is logged with every keyword it was given, `_stdin` included."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterator
from typing import TypedDict

from pyinfra import host
from pyinfra.api import StringCommand, operation

from vllm_rig.core.facts import SectionFact, Sections, section_command


class Secret:
    """A value that prints as <hidden> (or <none>); `reveal()` gives it to the code that needs it."""

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __str__(self) -> str:
        return "<hidden>" if self._value else "<none>"

    __repr__ = __str__


class SecretStdin:
    """Text for a command's stdin that prints as <stdin>. pyinfra writes whatever `readlines()` returns, which
    here is the whole text every time (a retried command gets it again)."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines(keepends=True)

    def readlines(self) -> list[str]:
        return list(self._lines)

    def __iter__(self) -> Iterator[str]:  # pyinfra checks `_stdin` is str, a list or an iterable of str
        return iter(self._lines)

    def __str__(self) -> str:
        return "<stdin>"

    __repr__ = __str__


# The service's API key: made once on the host, kept in a root-owned env file readable by the service.
class KeyFileState(TypedDict):
    exists: bool
    has_key: bool  # a non-empty VLLM_API_KEY= line is in it
    keys: int  # VLLM_API_KEY= lines: more than one is refused (systemd gives vLLM the last, nginx checks the first)
    mode: str | None  # octal, as stat %a prints it
    group: str | None


class KeyFile(SectionFact[KeyFileState]):
    """An env file's state, without reading the key itself."""

    DEFAULT: KeyFileState = {"exists": False, "has_key": False, "keys": 0, "mode": None, "group": None}

    def command(self, path: str) -> str:
        p = shlex.quote(path)
        return section_command(
            {
                "exists": f"test -f {p} && echo yes",
                "has_key": f'grep -c "^VLLM_API_KEY=." {p} 2>/dev/null',
                "keys": f'grep -c "^VLLM_API_KEY=" {p} 2>/dev/null',
                "stat": f"stat -c '%a %G' {p} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> KeyFileState:
        exists = sections.first("exists") == "yes"
        mode, _, group = (sections.first("stat") or "").partition(" ")
        return {
            "exists": exists,
            "has_key": exists and sections.integer("has_key", default=0) > 0,
            "keys": sections.integer("keys", default=0) if exists else 0,
            "mode": mode or None,
            "group": group or None,
        }


GENERATE = "python3 -c 'import secrets; print(\"VLLM_API_KEY=\" + secrets.token_urlsafe(32))'"


# Own operation: pyinfra has none that makes a value on the host once and keeps it.
@operation()
def api_key_file(path: str, group: str, enabled: bool):
    """With `enabled`, the file holds a VLLM_API_KEY made once (kept across runs); without, none."""
    found = host.get_fact(KeyFile, path=path)
    p, tmp = shlex.quote(path), shlex.quote(path + ".new")
    if found["keys"] > 1:
        said = f"{path} holds {found['keys']} VLLM_API_KEY= lines: nginx would check the first and vLLM take the last"
        yield f"echo {shlex.quote(said + '; keep one (delete the file to make a new key)')} >&2; exit 1"
        return
    if enabled and not found["has_key"]:
        yield f"umask 077; mkdir -p $(dirname {p}) && {GENERATE} > {tmp} && mv {tmp} {p}"
    elif not enabled and (found["has_key"] or not found["exists"]):
        yield f"umask 077; mkdir -p $(dirname {p}) && echo '# vllm_api_key: none' > {tmp} && mv {tmp} {p}"
    elif found["mode"] == "640" and found["group"] == group:
        host.noop(f"{path} is in place")
        return
    yield f"chown root:{shlex.quote(group)} {p} && chmod 640 {p}"


class PrivateFileState(TypedDict):
    mode: str
    owner: str  # user:group
    sha256: str


class PrivateFile(SectionFact["PrivateFileState | None"]):
    """A root-only file's mode, owner and sha256, or None: enough to tell whether it holds a secret, never
    reading the secret back."""

    DEFAULT: PrivateFileState | None = None

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return section_command(
            {"stat": f"stat -c '%a %U:%G' {q} 2>/dev/null", "sha256": f"sha256sum < {q} 2>/dev/null"}
        )

    def parse(self, sections: Sections) -> PrivateFileState | None:
        stat, digest = sections.first("stat"), sections.first("sha256")
        if stat is None or digest is None:
            return None
        mode, _, owner = stat.partition(" ")
        return {"mode": mode, "owner": owner, "sha256": digest.split()[0]}


# Own operation: pyinfra's files.put prints the content with --diff and uploads it before its chmod (readable
# by others for a moment); this one writes it 0600 from stdin and compares digests only.
@operation()
def secret_file(path: str, content: Secret):
    """`content` in a root-only 0600 file. It travels on stdin (never on a command line or in pyinfra's output)
    and is compared by its digest only."""
    text = content.reveal() or ""
    want = hashlib.sha256(text.encode()).hexdigest()
    found = host.get_fact(PrivateFile, path=path)
    if found == {"mode": "600", "owner": "root:root", "sha256": want}:
        host.noop(f"{path} is in place")
        return
    yield private_write(path, text)


def private_write(path: str, text: str) -> StringCommand:
    """The command that puts `text` in `path`, root only (0600), from stdin, replacing it whole."""
    q = shlex.quote(path)
    script = (
        f'mkdir -p $(dirname {q}) && umask 077 && tmp=$(mktemp {q}.XXXXXX) && cat > "$tmp" && '
        f'chown root:root "$tmp" && chmod 600 "$tmp" && mv -f "$tmp" {q}'
    )
    return StringCommand("sh", "-c", shlex.quote(script), _stdin=SecretStdin(text))
