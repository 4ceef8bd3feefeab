"""The host-side programs (vllm_rig/host/) as one zip application, uploaded once and run by any Python
on the host: `python3 <install_root>/bin/vllm-rig-host.pyz <program> [args]`.

The zip is built here, byte for byte the same from the same sources (sorted names, one fixed date), so
a re-run uploads nothing. Facts that need a host program before anything is uploaded (the model
preflight) send the same zip on stdin (`run_from_stdin`).
"""

from __future__ import annotations

import base64
import io
import json
import shlex
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

from vllm_rig.core.files import ConfigFile, config_files
from vllm_rig.core.run import first_in_run

PACKAGE = Path(__file__).resolve().parents[1] / "host"
ZIP_DATE = (2026, 1, 1, 0, 0, 0)  # any fixed date: file times would make every checkout's zip differ
ROOT_MAIN = b"from vllm_rig.host.__main__ import main\n\nmain()\n"


@cache
def zip_bytes() -> bytes:
    """vllm_rig/__init__.py (empty), vllm_rig/host/*.py and a root __main__.py, deterministic."""
    entries = {"__main__.py": ROOT_MAIN, "vllm_rig/__init__.py": b""}
    for path in sorted(PACKAGE.glob("*.py")):
        entries[f"vllm_rig/host/{path.name}"] = path.read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name])
    return buffer.getvalue()


def package_file(dest: str) -> ConfigFile:
    """The zip as a file for core.files.config_files (uploaded only when its sha256 differs)."""
    return ConfigFile(dest, zip_bytes(), "644")


# Reads an optional secret line, then the base64 zip, from stdin; runs the program from a private temp
# copy (a zip import needs a file) that is removed afterwards.
_BOOTSTRAP = (
    "import base64, os, runpy, sys, tempfile\n"
    "secret = sys.stdin.readline().strip()\n"
    "name = os.environ.get('VLLM_RIG_SECRET_ENV')\n"
    "name and secret and os.environ.__setitem__(name, secret)\n"
    "fd, path = tempfile.mkstemp(suffix='.pyz')\n"
    "os.write(fd, base64.b64decode(sys.stdin.read())); os.close(fd)\n"
    "try:\n"
    "    sys.path.insert(0, path); program = sys.argv.pop(1); sys.argv[0] = program + '.py'\n"
    "    runpy.run_module('vllm_rig.host.' + program, run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    os.unlink(path)\n"
)


def run_from_stdin(program: str, args: list[str], python: str = "python3", secret_env: str | None = None) -> str:
    """A command that runs `program` from the zip sent on stdin (see `stdin_text`); nothing is uploaded.
    With `secret_env`, stdin's first line becomes that environment variable (never on a command line)."""
    env = f"VLLM_RIG_SECRET_ENV={shlex.quote(secret_env)} " if secret_env else ""
    return f"{env}{python} -c {shlex.quote(_BOOTSTRAP)} {shlex.join([program, *args])}"


def answer(output: list[str], key: str) -> dict[str, Any] | None:
    """A host program's answer: the last line of its output that is a JSON object holding `key`."""
    for line in reversed(output):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and key in data:
            return data
    return None


def said(output: list[str]) -> str:
    """What a host program said instead of its answer: its last lines, for a one-line error."""
    return " | ".join(line.strip() for line in output[-3:] if line.strip()) or "no output"


def stdin_text(secret: str | None = None) -> str:
    """What `run_from_stdin`'s command reads: the secret line (empty without one), then the zip."""
    return f"{secret or ''}\n{base64.b64encode(zip_bytes()).decode()}\n"


def host_programs(dest: str) -> None:
    """Upload the zip to `dest` when it differs (one remote command when it does not). Every stage that runs
    a host program calls this, so each stage also runs alone; a whole deploy checks it once (a re-run of
    deploy.py checked it six times, ~40 ms each)."""
    if first_in_run("host programs", dest):
        config_files(name="Host programs (vllm-rig-host.pyz)", files=(package_file(dest),))
