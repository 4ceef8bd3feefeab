"""What the model stage reads off a host: the preflight verdict of vllm_rig/host/model_preflight.py, the download's
state (its transient unit, `model_fetch.py check`, the progress file) and the HF token file's digest."""

from __future__ import annotations

import json
import shlex
from typing import Any, TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command, split_sections
from vllm_rig.core.host_package import answer, run_from_stdin, said, stdin_text
from vllm_rig.core.secrets import SecretStdin


def preflight_stdin(token: str | None) -> SecretStdin:
    """What ModelPreflight's command reads: the token line (empty when none is configured), then the host
    package. Nothing is uploaded before preflight's verdict, and the token is never on a command line."""
    return SecretStdin(stdin_text(token))


class ModelPreflight(SectionFact[dict[str, Any]]):
    """Is repo@revision on the endpoint, and does the disk hold it? Pass `_stdin=preflight_stdin(token)`.

    Runs the host's system python3 with the standard library only: this is read before anything is installed.
    The verdict is the JSON object vllm_rig/host/model_preflight.py prints (its keys: that script's `emit`).
    """

    @staticmethod
    def default() -> dict[str, Any]:
        return parse_preflight([])

    def command(self, endpoint: str, repo: str, revision: str, dest: str) -> str:
        args = ["--endpoint", endpoint, "--repo", repo, "--revision", revision, "--dest", dest]
        return section_command({"preflight": run_from_stdin("model_preflight", args, secret_env="HF_TOKEN") + " 2>&1"})

    def parse(self, sections: Sections) -> dict[str, Any]:
        return parse_preflight(sections.lines("preflight"))


def parse_preflight(output: list[str]) -> dict[str, Any]:
    """The script's JSON line, or a failed verdict quoting what the host said instead."""
    problem = f"the model preflight did not run on the host: {said(output)}"
    return answer(output, "ok") or {"ok": False, "kind": "internal", "problem": problem}


class FetchState(TypedDict):
    active: str  # the download unit's ActiveState
    description: str  # its Description (names repo@revision)
    since: str  # its ActiveEnterTimestamp
    check_rc: int | None  # `model_fetch.py check`'s exit code; None when it could not run or the unit runs
    check: str  # what the check said
    status: dict[str, Any] | None  # the progress file model_fetch.py writes


class ModelFetch(SectionFact[FetchState]):
    """The download's state: its unit, `model_fetch.py check` (only when the unit is not running) and the
    progress file. `check_rc` is None when the check could not run (no tools venv or script yet)."""

    @staticmethod
    def default() -> FetchState:
        return fetch_state(Sections({}))

    def command(
        self, unit: str, python: str, package: str, repo: str, revision: str, dest: str, status_file: str
    ) -> str:
        q = shlex.quote
        check = f"{q(python)} {q(package)} model_fetch check --repo {q(repo)} --revision {q(revision)} --dest {q(dest)}"
        return section_command(
            {
                "unit": (f"systemctl show {q(unit)} -p ActiveState -p Description -p ActiveEnterTimestamp 2>/dev/null"),
                "check": (
                    f"if systemctl -q is-active {q(unit)}; then echo rc=running; "
                    f"elif [ -x {q(python)} ] && [ -f {q(package)} ]; then {check} 2>&1; echo rc=$?; "
                    "else echo rc=none; fi"
                ),
                "status": f"cat {q(status_file)} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> FetchState:
        return fetch_state(sections)


def parse_fetch_state(output: list[str]) -> FetchState:
    return fetch_state(Sections(split_sections(output)))


def fetch_state(sections: Sections) -> FetchState:
    props = dict(line.partition("=")[::2] for line in sections.lines("unit") if "=" in line)
    check_lines = sections.words("check")
    rc_text = check_lines[-1].removeprefix("rc=") if check_lines and check_lines[-1].startswith("rc=") else ""
    try:
        # A progress file caught half-written is not an error: the next poll reads it whole.
        status = json.loads(sections.text("status"))
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


class ServedModels(SectionFact[list[dict[str, Any]] | None]):
    """The host's record of the models it served, newest first, each with whether it is still on disk
    (`vllm-rig-host.pyz model_catalogue list`); None before the host programs are uploaded."""

    def command(self, package: str, record: str) -> str:
        q = shlex.quote
        listing = f"[ -f {q(package)} ] && python3 {q(package)} model_catalogue list --record {q(record)}"
        return section_command({"served": listing})

    def parse(self, sections: Sections) -> list[dict[str, Any]] | None:
        models = (answer(sections.lines("served"), "models") or {}).get("models")
        return models if isinstance(models, list) else None

    DEFAULT: None = None
