"""Model stage pieces without a host: fact parsers, the unit's command line, progress and failure lines, and the
preflight row for the model."""

from __future__ import annotations

import base64
import json
import platform
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.core.host_package import zip_bytes
from vllm_rig.core.secrets import PrivateFile, Secret, SecretStdin
from vllm_rig.stages.model.facts import (
    ModelFetch,
    ModelPreflight,
    parse_fetch_state,
    parse_preflight,
    preflight_stdin,
)
from vllm_rig.stages.model.operations import FetchSpec, failure_line, progress_line
from vllm_rig.stages.model.tools_venv import ToolsVenv
from vllm_rig.stages.preflight import checks as preflight
from vllm_rig.validation import load_settings

SETTINGS = load_settings(profile_data())
SPEC = FetchSpec.of(SETTINGS)
TOKEN = "hf_0123456789abcdefABCDEF"


def _status(**changes: object) -> dict[str, object]:
    status: dict[str, object] = {
        "repo": SETTINGS.model_repo,
        "revision": "main",
        "commit": "1e12d3d32292a63a744cc1698316d66dd9ba2156",
        "phase": "downloading",
        "bytes_done": 3 << 30,
        "bytes_total": 29 << 30,
        "files_done": 3,
        "files_total": 15,
        "message": "",
        "exit_code": None,
    }
    status.update(changes)
    return status


# ---- the unit ---------------------------------------------------------------------------------------


def test_start_command_runs_the_fetch_as_a_collected_transient_unit() -> None:
    spec = replace(SPEC, endpoint="https://hf-mirror.com", timeout_s=5400)
    words = shlex.split(spec.start_command().split(" && ", 1)[1])
    assert words[0] == "systemd-run" and "--collect" in words
    assert f"--unit={spec.unit}" in words and f"--description={spec.description}" in words
    assert "--property=RuntimeMaxSec=5400" in words
    assert "--property=EnvironmentFile=-/etc/vllm-rig/hf-token.env" in words  # optional: no token, no file
    fetch = words[words.index(spec.python) :]
    assert fetch[1:4] == [spec.package, "model_fetch", "fetch"]
    assert fetch[fetch.index("--revision") + 1] == "main" and fetch[fetch.index("--dest") + 1] == spec.dest
    assert fetch[fetch.index("--endpoint") + 1] == "https://hf-mirror.com" and "--disable-xet" in fetch
    assert "--disable-xet" not in replace(spec, disable_xet=False).fetch_argv()
    assert "rm -f /var/lib/vllm-rig/model-fetch.json" in spec.start_command()  # no stale verdict is read


def test_description_tells_one_model_and_dir_from_another() -> None:
    assert SPEC.description != replace(SPEC, revision="v2").description
    assert SPEC.description != replace(SPEC, dest="/data/model").description


def test_secret_never_prints() -> None:
    assert TOKEN not in f"{Secret(TOKEN)} {Secret(TOKEN)!r}" and str(Secret(None)) == "<none>"
    assert Secret(TOKEN).reveal() == TOKEN
    stdin = SecretStdin(f"{TOKEN}\nprint(1)\n")
    assert str(stdin) == repr(stdin) == "<stdin>"
    assert stdin.readlines() == stdin.readlines() == [f"{TOKEN}\n", "print(1)\n"]  # again on a retry


def test_preflight_stdin_holds_the_token_line_then_the_script() -> None:
    lines = preflight_stdin(TOKEN).readlines()
    assert lines[0] == f"{TOKEN}\n" and base64.b64decode(lines[1]) == zip_bytes()  # the host package, whole
    assert preflight_stdin(None).readlines()[0] == "\n"


# ---- facts ------------------------------------------------------------------------------------------


def test_fetch_state_while_running() -> None:
    output = [
        "@@unit",
        "ActiveState=active",
        f"Description={SPEC.description}",
        "ActiveEnterTimestamp=Sun 2026-11-29 18:39:33 UTC",
        "@@check",
        "rc=running",
        "@@status",
        *json.dumps(_status(), indent=1).splitlines(),
    ]
    state = parse_fetch_state(output)
    assert state["active"] == "active" and state["description"] == SPEC.description
    assert state["check_rc"] is None and state["status"]["bytes_total"] == 29 << 30


def test_fetch_state_when_done_or_never_started() -> None:
    done = parse_fetch_state(
        ["@@unit", "ActiveState=inactive", "@@check", "model_fetch: R@main: complete, commit abc", "rc=0", "@@status"]
    )
    assert done["check_rc"] == 0 and done["check"] == "R@main: complete, commit abc" and done["status"] is None
    fresh = parse_fetch_state(["@@unit", "ActiveState=inactive", "@@check", "rc=none", "@@status"])
    assert fresh["check_rc"] is None and fresh["active"] == "inactive"
    corrupt = parse_fetch_state(["@@unit", "@@check", "model_fetch: R@main: corrupt in /m: a.bin", "rc=4"])
    assert corrupt["check_rc"] == 4 and corrupt["active"] == "inactive"


def test_fact_commands_quote_what_they_are_given() -> None:
    command = ModelFetch().command(**{**SPEC.fact_args(), "dest": "/data/my model"})
    sh, dash_c, script = shlex.split(command)
    assert (sh, dash_c) == ("sh", "-c") and "--dest '/data/my model'" in script
    preflight_command = ModelPreflight().command("http://127.0.0.1:18080", "a/b", "main", "/m")
    sh, dash_c, script = shlex.split(preflight_command)
    assert (sh, dash_c) == ("sh", "-c") and TOKEN not in preflight_command
    assert "{ VLLM_RIG_SECRET_ENV=HF_TOKEN python3 -c " in script
    assert " model_preflight --endpoint http://127.0.0.1:18080 --repo a/b" in script


def test_preflight_fact_reads_the_json_line_or_says_what_went_wrong() -> None:
    good = parse_preflight(["noise", json.dumps({"ok": True, "state": "fetch", "commit": "a" * 40})])
    assert good["ok"] and good["commit"] == "a" * 40
    missing = parse_preflight(["sh: 1: python3: not found"])
    assert not missing["ok"] and "python3: not found" in missing["problem"] and missing["kind"] == "internal"


def test_secret_file_fact_gives_mode_owner_digest_or_none() -> None:
    assert PrivateFile().process(["@@stat", "600 root:root", "@@sha256", "ab" * 32 + "  -"]) == {
        "mode": "600",
        "owner": "root:root",
        "sha256": "ab" * 32,
    }
    assert PrivateFile().process(["@@stat", "@@sha256"]) is None


def test_tools_venv_fact_reads_a_real_venv(tmp_path: Path) -> None:
    venv = Path(sys.prefix)  # the venv this test runs in: a real one, without making another (13 s)
    assert venv != Path(sys.base_prefix), "the tests run in a venv"
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True)
    fact = ToolsVenv()
    run = subprocess.run(fact.command(path=str(venv), package="pip"), shell=True, capture_output=True, text=True)
    found = fact.process(run.stdout.splitlines())
    assert found["python"] == platform.python_version()
    assert found["version"] == pip.stdout.split()[1]
    missing = subprocess.run(fact.command(path=str(tmp_path / "no"), package="pip"), shell=True, capture_output=True)
    assert fact.process(missing.stdout.decode().splitlines())["python"] is None


def test_tools_venv_fact() -> None:
    fact = ToolsVenv()
    said = ["@@venv_pkg", "install ok installed", "@@python", "3.12.3", "@@version", "2.4.0", "@@lock", "ab" * 32]
    found = fact.process(said)
    assert found == {"python3_venv": True, "python": "3.12.3", "version": "2.4.0", "lock": "ab" * 32}
    assert fact.process(["@@venv_pkg", "@@python", "@@version", "@@lock"]) == {
        "python3_venv": False,
        "python": None,
        "version": None,
        "lock": None,
    }


# ---- progress and failure lines ---------------------------------------------------------------------


def test_progress_line_says_bytes_of_total_files_and_rate() -> None:
    line = progress_line(_status(), rate=11.5 * (1 << 20))
    # 26 GiB left at 11.5 MiB/s: 2315 s
    assert line == "downloading 3.0 GiB of 29.0 GiB (10%), 3/15 files, 11.5 MiB/s, about 38m35s left"
    assert "left" not in progress_line(_status(), rate=None)  # no rate yet: no guess
    assert progress_line(None) == "starting" and progress_line({"phase": "resolving"}) == "resolving"


@pytest.mark.parametrize(
    ("status", "check", "says"),
    [
        (_status(), "", "stopped without a verdict"),  # killed: no exit code was written
        (_status(phase="stopped", exit_code=3), "", "download_timeout_s"),
        (_status(phase="failed", exit_code=4, message="R@abc: still corrupt after a re-fetch: x"), "", "still corrupt"),
        (None, "R@main: incomplete in /m (no completion marker)", "no completion marker"),
    ],
)
def test_failure_line_uses_the_fetchs_own_words(status: object, check: str, says: str) -> None:
    state = {"active": "inactive", "check_rc": 3, "check": check, "status": status}
    assert says in failure_line(state, SPEC)


# ---- preflight row ----------------------------------------------------------------------------------


def test_preflight_model_row() -> None:
    fetch = {"ok": True, "state": "fetch", "commit": "1e12d3d32292" + "0" * 28, "total_bytes": 29_000_000_000}
    fetch.update(file_count=15, free_bytes=80_000_000_000, where="/opt")
    row = preflight.check_model(fetch, SETTINGS)
    assert row.status == "ok" and "1e12d3d32292" in row.detail and "29.0 GB" in row.detail
    complete = {"ok": True, "state": "complete", "commit": "abc", "total_bytes": 51_000_000, "file_count": 14}
    assert "complete on the host" in preflight.check_model(complete, SETTINGS).detail
    for kind, way_out in [("endpoint", "model_repo"), ("unreachable", "hf_endpoint"), ("disk", "bigger disk")]:
        row = preflight.check_model({"ok": False, "kind": kind, "problem": "p"}, SETTINGS)
        assert row.status == "fail" and row.detail == "p" and way_out in row.way_out


def test_preflight_verdict_includes_the_model_only_when_read() -> None:
    from tests.unit.test_preflight import HEALTHY_HOST

    without = preflight.verdict(HEALTHY_HOST, None, SETTINGS)
    assert "model" not in {c.name for c in without}
    refused = {"ok": False, "kind": "endpoint", "problem": "a/b@main: repository not found at https://x"}
    checks = preflight.verdict(HEALTHY_HOST, None, SETTINGS, model=refused)
    assert preflight.has_failures(checks) and checks[-1].name == "model"


def test_served_models_fact_reads_the_listing_of_the_real_script(tmp_path: Path) -> None:
    from vllm_rig.stages.model.facts import ServedModels

    record = tmp_path / "models.json"
    record.write_text(json.dumps({"models": [{"name": "a", "repo": "o/a", "revision": "main", "dir": str(tmp_path)}]}))
    from vllm_rig.core.host_package import zip_bytes

    package = tmp_path / "vllm-rig-host.pyz"  # the host programs as the deploy uploads them
    package.write_bytes(zip_bytes())
    command = ServedModels().command(package=str(package), record=str(record))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout.splitlines()
    assert ServedModels().process(out) == [
        {"name": "a", "repo": "o/a", "revision": "main", "dir": str(tmp_path), "present": True}
    ]
    missing = ServedModels().command(package=str(tmp_path / "absent.pyz"), record=str(record))
    assert (
        ServedModels().process(
            subprocess.run(["sh", "-c", missing], capture_output=True, text=True).stdout.splitlines()
        )
        is None
    )


def test_which_models_a_switch_removes() -> None:
    from vllm_rig.stages.model.operations import ServedModel, models_to_remove

    served = ServedModel("a", "o/a", "main", "/m/a")
    record = [
        {"name": "b", "dir": "/m/b", "present": True},
        {"name": "a", "dir": "/m/a", "present": True},  # the one served is never among them
        {"name": "gone", "dir": "/m/gone", "present": False},  # removed by hand already
        {"name": "c", "dir": "/m/c", "present": True},
    ]
    assert models_to_remove(served, record, keep=1) == ["/m/c"]
    assert models_to_remove(served, record, keep=0) == ["/m/b", "/m/c"]
    assert models_to_remove(served, record, keep=5) == []
    assert served.matches({"name": "a", "repo": "o/a", "revision": "main", "dir": "/m/a", "present": True})
    assert not served.matches({"name": "a", "repo": "o/a", "revision": "v2", "dir": "/m/a"})


def test_the_model_peer_server_runs_unprivileged_with_the_system_read_only() -> None:
    """Issue 23: the peer server ran as root. tests/e2e/test_model_peers.py shows it still serves this way."""
    from vllm_rig.stages.model.operations import ServeSpec

    spec = ServeSpec("o/m", "main", "/srv/models/m", "10.0.0.2", 28480, "/opt/vllm-rig/bin/h.pyz", 3600)
    words = shlex.split(spec.start_command().rsplit("; ", 1)[1])
    for prop in ("DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes"):
        assert f"--property={prop}" in words, prop
    assert "--property=CapabilityBoundingSet=" in words and "--property=RuntimeMaxSec=3600" in words


# ---- one read of a complete download per run -------------------------------------------------------


class _Host:
    """A run's Host object: what kept_once keys on and asks."""

    name = "box"

    def __init__(self, found: dict[str, object]) -> None:
        self.found, self.reads = found, 0

    def get_fact(self, fact: object, **kwargs: object) -> dict[str, object]:
        self.reads += 1
        return self.found


@pytest.mark.parametrize(
    ("lines", "reads"),
    [
        (["@@unit", "ActiveState=inactive", "@@check", "model_fetch: R@main: complete", "rc=0"], 1),
        (["@@unit", "ActiveState=active", "@@check", "rc=running"], 3),  # a running download is read each time
        (["@@unit", "ActiveState=inactive", "@@check", "model_fetch: R@main: incomplete", "rc=3"], 3),
    ],
)
def test_a_complete_download_is_read_once_per_run(lines: list[str], reads: int) -> None:
    from pyinfra.context import ctx_host

    from vllm_rig.stages.model.operations import fetch_state

    box = _Host(dict(parse_fetch_state(lines)))
    with ctx_host.use(box):
        for _ in range(3):  # model start, resume and finish
            fetch_state(SPEC)
        assert box.reads == reads
        fetch_state(replace(SPEC, revision="v2"))  # another model is its own read
        assert box.reads == reads + 1
    again = _Host(box.found)  # the next run has its own Host objects: it reads the host again
    with ctx_host.use(again):
        fetch_state(SPEC)
    assert again.reads == 1
