#!/usr/bin/env python3
"""Write a triage bundle: one .tar.gz of what a bug report needs, with every secret redacted. Stdlib only;
tasks/triage.py sends it on stdin in the host package (vllm_rig.core.host_package.run_from_stdin), so it works
on a half-deployed host.

    VLLM_RIG_TRIAGE_SPEC=<json> python3 vllm-rig-host.pyz triage

The spec comes in the environment (the stdin bootstrap puts its first line there: it lists secret values to
redact, so it is never on a command line):
  {"out": archive path, "top": folder name inside the archive,
   "parts": {archive name: {"command": shell} | {"file": path}},
   "given": {archive name: text made on the control side (settings, preflight verdict, status)},
   "secret_files": [paths of KEY=VALUE files whose values are secrets (the API key's env file, the HF token's)],
   "secrets": [more values to redact]}
Every part is read as text and every secret value found in it is replaced by <redacted:KEY> before anything is
written, in every form the value can take there (secret_forms): as is, URL-encoded, inside base64 (at any of
the three byte alignments, standard or URL-safe alphabet), and any 8+ character prefix at the end of a part or
line or suffix at its start (a part cut at MAX_PART, a line cut by a log's width). MANIFEST.json lists each
part, how it was read, its exit code and how many values were redacted (never the values). The archive is
written 0600 next to `out` and renamed into place. Prints one JSON line: the archive path, the parts and the
redaction count.
"""

from __future__ import annotations

import argparse
import base64
import functools
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.parse
from typing import Any

MAX_PART = 8 * 1024 * 1024
MIN_SECRET = 8  # shorter values ("1", "auto") would redact ordinary words


def secret_values(paths: list[str], extra: list[str]) -> dict[str, str]:
    """value -> the name it is redacted as, from KEY=VALUE files (missing files are skipped)."""
    found: dict[str, str] = {}
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            name, sep, value = line.partition("=")
            value = value.strip().strip('"').strip("'")
            if sep and not name.lstrip().startswith("#") and len(value) >= MIN_SECRET:
                found[value] = name.strip()
    for value in extra:
        if value and len(value) >= MIN_SECRET:
            found.setdefault(value, "secret")
    return found


# Secrets known by their shape, whatever their value: NAME=value where the name ends in _KEY, _TOKEN, _SECRET or
# _PASSWORD (env files, `systemctl cat`, journals), --api-key's value, and a URL's user:password@.
SHAPES = (
    (
        re.compile(
            r"\b([A-Za-z_][A-Za-z0-9_]*(?:_KEY|_TOKEN|_SECRET|_PASSWORD))=(?!<redacted)(\"[^\"]*\"|'[^']*'|[^\s\"']+)",
            re.I,
        ),
        "env",
    ),
    (re.compile(r"(--api-key)(=|\s+)(?!<redacted)([^\s\"']+)"), "api-key"),
    (re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)(?!<redacted)[^\s/@\"']+@"), "userinfo"),
)


def _shape(match: re.Match[str], kind: str) -> str:
    if kind == "env":
        return f"{match[1]}=<redacted:{match[1]}>"
    if kind == "api-key":
        return f"{match[1]}{match[2]}<redacted:api-key>"
    return f"{match[1]}<redacted:userinfo>@"


def _base64_cores(value: bytes) -> list[str]:
    """The base64 text a value becomes inside any longer base64 string: at each of the 3 byte alignments, the
    characters made only of the value's bits (the first and last depend on the bytes around it)."""
    cores = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + value + b"\0\0\0").decode()
        start, end = -(-8 * pad // 6), 8 * (pad + len(value)) // 6
        cores.append(encoded[start:end])
    return cores


def secret_forms(value: str) -> list[str]:
    """Every spelling of a secret that can stand in a log, a journal or a config: as is, URL-encoded, and
    inside base64 (standard and URL-safe alphabets), each at least MIN_SECRET long."""
    forms = {value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
    for core in _base64_cores(value.encode()):
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return sorted((f for f in forms if len(f) >= MIN_SECRET), key=len, reverse=True)


@functools.lru_cache(maxsize=256)
def _cut_pattern(form: str) -> re.Pattern[str]:
    """A prefix of `form` (MIN_SECRET or more characters) ending a part or a line, or a suffix starting one.
    The prefixes as one literal and nested optional characters, so an 8 MiB part is scanned in linear time."""
    head, rest = re.escape(form[:MIN_SECRET]), form[MIN_SECRET:-1]
    prefix = head + "".join("(?:" + re.escape(c) for c in rest) + ")?" * len(rest)
    suffixes = "|".join(re.escape(form[-n:]) for n in range(len(form) - 1, MIN_SECRET - 1, -1))
    return re.compile(f"{prefix}(?=\\r?$)" + (f"|^(?:{suffixes})" if suffixes else ""), re.M)


def redact(text: str, secrets: dict[str, str]) -> tuple[str, int]:
    count = 0
    forms = [(form, name) for value, name in secrets.items() for form in secret_forms(value)]
    forms.sort(key=lambda pair: len(pair[0]), reverse=True)  # a longer secret that contains a shorter one first
    for form, name in forms:
        hits = text.count(form)
        if hits:
            text = text.replace(form, f"<redacted:{name}>")
            count += hits
    for form, name in forms:
        text, hits = _cut_pattern(form).subn(f"<redacted:{name}>", text)
        count += hits
    for pattern, kind in SHAPES:
        text, hits = pattern.subn(functools.partial(_shape, kind=kind), text)
        count += hits
    return text, count


def read_part(part: dict, timeout: float) -> tuple[str, dict]:
    if "command" in part:
        try:
            proc = subprocess.run(
                ["sh", "-c", part["command"]], capture_output=True, text=True, errors="replace", timeout=timeout
            )
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            text, rc = f"timed out after {timeout:.0f} s\n", 124
        return f"$ {part['command']}\n{text[-MAX_PART:]}", {"command": part["command"], "rc": rc}
    try:
        with open(part["file"], errors="replace") as f:
            return f.read(MAX_PART), {"file": part["file"], "present": True}
    except OSError as err:
        return f"(not read: {err.strerror}: {part['file']})\n", {"file": part["file"], "present": False}


def bundle(spec: dict) -> dict:
    secrets = secret_values(spec.get("secret_files") or [], spec.get("secrets") or [])
    timeout = float(spec.get("timeout", 60))
    top = spec["top"]
    members: list[tuple[str, bytes]] = []
    manifest: dict = {"made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": {}, "redacted_total": 0}
    texts: list[tuple[str, str, dict[str, Any]]] = [
        (name, text, {"given": True}) for name, text in (spec.get("given") or {}).items()
    ]
    for name, part in (spec.get("parts") or {}).items():
        text, how = read_part(part, timeout)
        texts.append((name, text, how))
    for name, text, how in texts:
        clean, count = redact(text, secrets)
        if "command" in how:  # the command line can carry a secret too (the manifest must not)
            how = {**how, "command": redact(how["command"], secrets)[0]}
        manifest["parts"][name] = {**how, "bytes": len(clean.encode()), "redacted": count}
        manifest["redacted_total"] += count
        members.append((name, clean.encode()))
    members.append(("MANIFEST.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()))
    out = spec["out"]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    tmp = f"{out}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)
    return {"archive": out, "parts": len(members), "redacted": manifest["redacted_total"]}


SPEC_ENV = "VLLM_RIG_TRIAGE_SPEC"


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="triage.py", description=f"Write a triage bundle from the JSON spec in ${SPEC_ENV}."
    ).parse_args(argv)
    spec = os.environ.get(SPEC_ENV)
    if not spec:
        print(f"triage.py: no spec in ${SPEC_ENV}", file=sys.stderr)
        return 2
    print(json.dumps(bundle(json.loads(spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
