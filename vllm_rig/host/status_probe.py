#!/usr/bin/env python3
"""Read-only collector for the status view: runs the commands, reads the files and asks the URLs a JSON spec names,
and prints one JSON object with what it found. Stdlib only; the status sends it on stdin in the host package
(vllm_rig.core.host_package.run_from_stdin), so it works on a host where nothing of vllm-rig is installed yet.

    python3 vllm-rig-host.pyz status_probe SPEC_JSON

SPEC: {"commands": {name: shell command}, "files": {name: path or glob}, "json_keep": {name: [keys]},
       "http": {name: {"url": URL, "key_file": env file holding VLLM_API_KEY= (optional)}}, "timeout": s}
Out:  {"time": epoch seconds, "commands": {name: {"rc", "out"}}, "files": {name: text | null | {path: text}},
       "http": {name: {"status", "body"} or {"error"}}}
A file name in json_keep is parsed as JSON and only those keys are kept (a model marker lists every file's hash).
The API key is read here (server_client.py, the start check's reader) and sent in a header; it is never printed.
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time

from . import server_client

MAX_BODY = 2 * 1024 * 1024


def run(command: str, timeout: float) -> dict:
    try:
        proc = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": f"timed out after {timeout:.0f} s"}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr}


def read(path: str, keep: list[str] | None) -> str | None:
    try:
        with open(path, errors="replace") as f:
            text = f.read(MAX_BODY)
    except OSError:
        return None
    if keep is None:
        return text
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return json.dumps({k: data.get(k) for k in keep} if isinstance(data, dict) else data)


def fetch(url: str, key_file: str | None, timeout: float) -> dict:
    key = server_client.read_key(key_file) if key_file else None
    status, body = server_client.request(url, "", key, timeout=timeout)
    if status == 0:
        return {"error": body, "key_sent": bool(key)}
    return {"status": status, "body": body[:MAX_BODY], "key_sent": bool(key)}


def probe(spec: dict) -> dict:
    timeout = float(spec.get("timeout", 10))
    keep = spec.get("json_keep") or {}
    files: dict = {}
    for name, path in (spec.get("files") or {}).items():
        if any(c in path for c in "*?["):
            files[name] = {p: read(p, keep.get(name)) for p in sorted(glob.glob(path))}
        else:
            files[name] = read(path, keep.get(name))
    return {
        "time": time.time(),
        "commands": {name: run(cmd, timeout) for name, cmd in (spec.get("commands") or {}).items()},
        "files": files,
        "http": {name: fetch(h["url"], h.get("key_file"), timeout) for name, h in (spec.get("http") or {}).items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="status_probe.py", description="Read-only collector (see the module doc).")
    parser.add_argument("spec", help="the JSON spec: commands, files, json_keep, http, timeout")
    args = parser.parse_args(argv)
    print(json.dumps(probe(json.loads(args.spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
