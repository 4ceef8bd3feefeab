#!/usr/bin/env python3
"""The LAN proxy's client keys, one per client, made and kept on the box (stdlib only).

    python3 vllm-rig-host.pyz lan_keys ensure --dir D NAME...   make each named key that is missing (not revoked ones)
    python3 vllm-rig-host.pyz lan_keys add --dir D NAME         make NAME's key (a revoked name gets a new one)
    python3 vllm-rig-host.pyz lan_keys revoke --dir D NAME      delete NAME's key, remember it was revoked
    python3 vllm-rig-host.pyz lan_keys state --dir D            JSON: names with when made, revoked names
    python3 vllm-rig-host.pyz lan_keys map --dir D --env-file E --out F [--check]
    python3 vllm-rig-host.pyz lan_keys list --dir D --log L [--since EPOCH]

Each key is the file D/NAME (root, 0600, the bare key and a newline): `sudo cat D/NAME` is how an owner reads
it, and nothing here ever prints a key. D/.revoked.json records revoked names, so a deploy whose settings
still name one does not make it again. `map` writes nginx's map (root, 0600) from these files and the
server's own key (VLLM_API_KEY in E); `list` counts each key's requests in nginx's access log, which names
the key (never the key itself) in its second field.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import tempfile
import time
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
SERVER = "server"  # the server's own key (VLLM_API_KEY) in the map and the log; no client key takes this name
REVOKED = ".revoked.json"
# What a Bearer token may hold (RFC 6750 b64token); a key file holding anything else is left out of the map.
TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")
DUPLICATE_KEYS = (
    "the API key file holds {n} VLLM_API_KEY= lines: nginx would check the first and vLLM take the last; "
    "keep one (delete the file to make a new key)"
)
# nginx's access log line (templates/lan/nginx-site.conf.j2, log_format vllm_rig_keys): the client address,
# key=NAME (or key=-), ..., and $msec last.
LOG_LINE = re.compile(r"^\S+ key=([a-z][a-z0-9-]*|-) .* (\d+\.\d+)$")


class Refused(Exception):
    """One line for the owner; the program exits 1 with it."""


def check_name(name: str) -> str:
    if not NAME.match(name) or name == SERVER:
        raise Refused(
            f"key name {name!r}: allowed is a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32), "
            f"not {SERVER!r} (the server's own key)"
        )
    return name


def _write_private(path: Path, text: str) -> None:
    """text in path, root-only, replaced whole (a reader sees the old file or the new one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _keys_dir(directory: str) -> Path:
    d = Path(directory)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def keys(directory: str) -> dict[str, float]:
    """Each key's name and when it was made (its file's mtime)."""
    d = Path(directory)
    if not d.is_dir():
        return {}
    return {p.name: p.stat().st_mtime for p in sorted(d.iterdir()) if NAME.match(p.name) and p.is_file()}


def revoked(directory: str) -> dict[str, float]:
    try:
        data = json.loads((Path(directory) / REVOKED).read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, (int, float))}


def _set_revoked(directory: str, names: dict[str, float]) -> None:
    _write_private(_keys_dir(directory) / REVOKED, json.dumps(names, sort_keys=True) + "\n")


def make(directory: str, name: str) -> None:
    d = _keys_dir(directory)
    _write_private(d / check_name(name), secrets.token_urlsafe(32) + "\n")
    gone = revoked(directory)
    if gone.pop(name, None) is not None:
        _set_revoked(directory, gone)


def revoke(directory: str, name: str) -> None:
    path = Path(directory) / check_name(name)
    if not path.is_file():
        raise Refused(f"no key named {name} on this box (bin/rig keys list shows the names)")
    path.unlink()
    _set_revoked(directory, {**revoked(directory), name: time.time()})


def ensure(directory: str, names: list[str]) -> list[str]:
    """Make each named key that is neither there nor revoked; the lines to say (never a key)."""
    there, gone = keys(directory), revoked(directory)
    said = []
    for name in map(check_name, names):
        if name in there:
            continue
        if name in gone:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(gone[name]))
            said.append(
                f"warn: api_keys names {name}, revoked on this box on {when}: not made again "
                f"(take it out of api_keys, or bin/rig keys add {name} for a new key)"
            )
            continue
        make(directory, name)
        said.append(f"made {name}: sudo cat {Path(directory) / name}")
    return said


def server_key(env_file: str) -> str | None:
    """VLLM_API_KEY in the service's env file; two such lines are refused (systemd gives vLLM the last)."""
    try:
        lines = Path(env_file).read_text().splitlines()
    except OSError:
        return None
    found = [line.split("=", 1)[1] for line in lines if line.startswith("VLLM_API_KEY=")]
    if len(found) > 1:
        raise Refused(DUPLICATE_KEYS.format(n=len(found)))
    return found[0] if found and found[0] else None


def client_keys(directory: str) -> dict[str, str]:
    """name -> key, for the key files that hold a Bearer token (a file edited into something else is left out)."""
    out = {}
    for name in keys(directory):
        text = (Path(directory) / name).read_text(errors="replace").strip()
        if TOKEN.match(text):
            out[name] = text
    return out


def regex_literal(key: str) -> str:
    """key as a PCRE literal inside an nginx quoted string: every character but a letter or digit escaped for
    PCRE, and a backslash or quote again for nginx's string (so a key with | . * $ matches only itself)."""
    out = []
    for c in key:
        if c.isascii() and c.isalnum():
            out.append(c)
        elif c == "\\":
            out.append("\\\\\\\\")
        elif c == '"':
            out.append('\\"')
        else:
            out.append("\\" + c)
    return "".join(out)


def string_literal(text: str) -> str:
    """text inside an nginx quoted string (geo values are taken literally: no variables)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_map(server: str, clients: dict[str, str]) -> str:
    """The map nginx includes: the Authorization header to the key's name ("" for none), and the header sent
    upstream, which always carries the server's own key."""
    lines = [
        "# vllm-rig: made on the box from the service's API key and the client keys; root only. Do not edit.",
        "map $http_authorization $vllm_rig_key_name {",
        '    default "";',
        # vLLM's AuthenticationMiddleware: scheme "bearer" in any case, one space, the key (server_utils.py).
        f'    "~^(?i:bearer) {regex_literal(server)}$" {SERVER};',
    ]
    lines += [f'    "~^(?i:bearer) {regex_literal(key)}$" {name};' for name, key in sorted(clients.items())]
    lines += [
        "}",
        # A geo block's values are plain text, where a map's value would read a "$" in the key as a variable.
        "geo $vllm_rig_upstream_authorization {",
        f'    default "Bearer {string_literal(server)}";',
        "}",
    ]
    return "\n".join(lines) + "\n"


def map_text(directory: str, env_file: str) -> str | None:
    server = server_key(env_file)
    return None if server is None else render_map(server, client_keys(directory))


def map_state(directory: str, env_file: str, out: str) -> str:
    """same (the file holds the map, 0600), differs, or nokey (no server key: nothing to send upstream)."""
    want = map_text(directory, env_file)
    if want is None:
        return "nokey"
    path = Path(out)
    try:
        same = (path.stat().st_mode & 0o777) == 0o600 and path.read_text() == want
    except OSError:
        same = False
    return "same" if same else "differs"


def requests_since(logs: list[str], since: float) -> dict[str, int]:
    """Requests per key name (and "-" without a key) in the access logs with $msec after `since`."""
    counts: dict[str, int] = {}
    for log in logs:
        try:
            lines = Path(log).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            m = LOG_LINE.match(line)
            if m and float(m.group(2)) > since:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def listing(directory: str, log: str, since: float) -> dict:
    """The names, when each was made, its requests since `since` (the current log and the one rotated last)."""
    counts = requests_since([f"{log}.1", log], since)
    made = keys(directory)
    return {
        "now": time.time(),
        "since": since,
        "keys": {name: {"made": at, "requests": counts.get(name, 0)} for name, at in made.items()},
        "server": counts.get(SERVER, 0),
        "without_key": counts.get("-", 0),
        "revoked": revoked(directory),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lan_keys.py", description="The LAN proxy's client keys (see the module doc).")
    p.add_argument("action", choices=("ensure", "add", "revoke", "state", "map", "list"))
    p.add_argument("names", nargs="*")
    p.add_argument("--dir", required=True)
    p.add_argument("--env-file")
    p.add_argument("--out")
    p.add_argument("--check", action="store_true")
    p.add_argument("--log")
    p.add_argument("--since", type=float, default=0.0)
    a = p.parse_intermixed_args(argv)  # names after --dir too
    try:
        return _run(a)
    except Refused as err:
        print(f"keys: {err}", file=sys.stderr)
        return 1


def _run(a: argparse.Namespace) -> int:
    if a.action in ("add", "revoke") and len(a.names) != 1:
        raise Refused(f"{a.action} takes one name")
    if a.action == "ensure":
        for line in ensure(a.dir, a.names):
            print(line)
    elif a.action == "add":
        name = check_name(a.names[0])
        if name in keys(a.dir):
            print(f"kept {name}: it has a key already (bin/rig keys revoke {name}, then add, for a new one)")
        else:
            make(a.dir, name)
            print(f"made {name}: sudo cat {Path(a.dir) / name}")
    elif a.action == "revoke":
        revoke(a.dir, a.names[0])
        print(f"revoked {a.names[0]}")
    elif a.action == "state":
        print(json.dumps({"keys": sorted(keys(a.dir)), "revoked": sorted(revoked(a.dir))}))
    elif a.action == "map":
        if a.check:
            print(map_state(a.dir, a.env_file, a.out))
            return 0
        text = map_text(a.dir, a.env_file)
        if text is None:
            raise Refused(f"no VLLM_API_KEY in {a.env_file}: the proxy has no key to send the server")
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_private(out, text)
    else:
        print(json.dumps(listing(a.dir, a.log, a.since)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
