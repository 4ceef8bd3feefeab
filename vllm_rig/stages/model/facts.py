"""What the model stage reads off a host: the preflight verdict of vllm_rig/host/model_preflight.py, the download's
state (its transient unit, `model_fetch.py check`, the progress file) and the HF token file's digest."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections
from vllm_rig.core.host_package import run_from_stdin, stdin_text
from vllm_rig.core.secrets import SecretStdin


def preflight_stdin(token: str | None) -> SecretStdin:
    """What ModelPreflight's command reads: the token line (empty when none is configured), then the host
    package. Nothing is uploaded before preflight's verdict, and the token is never on a command line."""
    return SecretStdin(stdin_text(token))


class ModelPreflight(FactBase):
    """Is repo@revision on the endpoint, and does the disk hold it? Pass `_stdin=preflight_stdin(token)`.

    Runs the host's system python3 with the standard library only: this is read before anything is installed.
    """

    def command(self, endpoint: str, repo: str, revision: str, dest: str) -> str:
        args = ["--endpoint", endpoint, "--repo", repo, "--revision", revision, "--dest", dest]
        return run_from_stdin("model_preflight", args, secret_env="HF_TOKEN") + " 2>&1 || true"

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_preflight(output)


def parse_preflight(output: list[str]) -> dict[str, Any]:
    """The script's JSON line, or a failed verdict quoting what the host said instead."""
    for line in reversed(output):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "ok" in data:
            return data
    said = " | ".join(line.strip() for line in output[-3:] if line.strip()) or "no output"
    return {"ok": False, "kind": "internal", "problem": f"the model preflight did not run on the host: {said}"}


class ModelFetch(FactBase):
    """The download's state: its unit, `model_fetch.py check` (only when the unit is not running) and the
    progress file. `check_rc` is None when the check could not run (no tools venv or script yet)."""

    def command(
        self, unit: str, python: str, package: str, repo: str, revision: str, dest: str, status_file: str
    ) -> str:
        q = shlex.quote
        check = f"{q(python)} {q(package)} model_fetch check --repo {q(repo)} --revision {q(revision)} --dest {q(dest)}"
        script_text = (
            f"echo @@unit; systemctl show {q(unit)} -p ActiveState -p Description -p ActiveEnterTimestamp "
            "2>/dev/null || true; "
            f"echo @@check; if systemctl -q is-active {q(unit)}; then echo rc=running; "
            f"elif [ -x {q(python)} ] && [ -f {q(package)} ]; then {check} 2>&1; echo rc=$?; else echo rc=none; fi; "
            f"echo @@status; cat {q(status_file)} 2>/dev/null || true"
        )
        return "sh -c " + q(script_text)

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_fetch_state(output)


def parse_fetch_state(output: list[str]) -> dict[str, Any]:
    raw = split_sections(output)
    props = dict(line.partition("=")[::2] for line in raw.get("unit", []) if "=" in line)
    check_lines = [line.strip() for line in raw.get("check", []) if line.strip()]
    rc_text = check_lines[-1].removeprefix("rc=") if check_lines and check_lines[-1].startswith("rc=") else ""
    try:
        status = json.loads("\n".join(raw.get("status", [])))
    except ValueError:
        status = None
    return {
        "active": props.get("ActiveState", "inactive"),
        "description": props.get("Description", ""),
        "since": props.get("ActiveEnterTimestamp", ""),
        "check_rc": int(rc_text) if rc_text.isdigit() else None,
        "check": " ".join(line for line in check_lines[:-1]).removeprefix("model_fetch: "),
        "status": status if isinstance(status, dict) else None,
    }


class SecretFile(FactBase):
    """A root-only file's mode, owner and sha256, or None: enough to tell whether a secret is in place
    without ever reading it back."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"if [ -f {q} ]; then stat -c '%a %U:%G' {q}; sha256sum < {q}; fi"

    def process(self, output: list[str]) -> dict[str, str] | None:
        lines = [line.strip() for line in output if line.strip()]
        if len(lines) < 2:
            return None
        mode, _, owner = lines[0].partition(" ")
        return {"mode": mode, "owner": owner, "sha256": lines[1].split()[0]}

    @staticmethod
    def default() -> None:
        return None
