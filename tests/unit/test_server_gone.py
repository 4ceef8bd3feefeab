"""A server that dies is said at once: the unit's state as `systemctl show` prints it, the server's error line
from `journalctl -u vllm -n 40 -o cat`, and the waits (start check, deploy probe) that stop on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_rig.host import server_gone, service_probe

# `systemctl show vllm.service -p MainPID,ActiveState,SubState,Result,ExecMainCode,ExecMainStatus` while the start
# check runs and the server has exited 2 (argparse refused a flag): systemd keeps the unit in start-post.
EXITED_IN_START_POST = """MainPID=0
Result=success
ExecMainCode=1
ExecMainStatus=2
ActiveState=activating
SubState=start-post
"""
LOADING = (
    "MainPID=4242\nResult=success\nExecMainCode=0\nExecMainStatus=0\nActiveState=activating\nSubState=start-post\n"
)
FAILED = "MainPID=0\nResult=exit-code\nExecMainCode=1\nExecMainStatus=2\nActiveState=failed\nSubState=failed\n"
# The start check asked for a restart (KV cache shrunk): systemd stopped the server with SIGTERM.
RESTART_ASKED = (
    "MainPID=0\nResult=exit-code\nExecMainCode=2\nExecMainStatus=15\nActiveState=activating\nSubState=auto-restart\n"
)
CRASHED_RESTARTING = (
    "MainPID=0\nResult=core-dump\nExecMainCode=3\nExecMainStatus=11\nActiveState=activating\nSubState=auto-restart\n"
)
# The fork's argparse refusing the upstream kind's flag, as the journal's `-o cat` shows it.
JOURNAL_BAD_FLAG = """INFO 12-06 08:01:02 [__init__.py:216] Automatically detected platform cuda.
usage: vllm serve [model_tag] [options]
vllm serve: error: argument --reasoning-config: invalid loads value: '{"thinking_budget": 4000}'
vllm.service: Main process exited, code=exited, status=2/INVALIDARGUMENT
"""
JOURNAL_OOM = """INFO 12-06 08:03:10 [gpu_model_runner.py:2001] Model loading took 14.2 GiB
ERROR 12-06 08:03:40 [core.py:700] EngineCore failed to start.
Traceback (most recent call last):
  File "/opt/vllm-rig/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 691, in run_engine_core
    raise e
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity of 23.57 GiB
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
vllm.service: Main process exited, code=exited, status=1/FAILURE
"""


def props(text: str) -> dict[str, str]:
    return server_gone.parse_show(text)


def test_a_server_that_exited_while_the_start_check_waits_is_gone() -> None:
    assert server_gone.gone(props(EXITED_IN_START_POST)) == "the server exited (status=2/INVALIDARGUMENT)"


def test_a_loading_server_and_a_restart_the_start_check_asked_for_are_waited_for() -> None:
    assert server_gone.gone(props(LOADING)) is None
    assert server_gone.gone(props(RESTART_ASKED)) is None
    assert server_gone.gone(props("ActiveState=activating\nSubState=start-pre\nMainPID=0\n")) is None


def test_a_failed_unit_and_a_crash_are_gone() -> None:
    assert server_gone.gone(props(FAILED)) == "the service failed (result exit-code) (status=2/INVALIDARGUMENT)"
    assert server_gone.gone(props(CRASHED_RESTARTING)) == "the server exited (signal=SEGV); systemd is restarting it"


def test_the_argparse_refusal_is_the_line() -> None:
    line = server_gone.one_line("the server exited", JOURNAL_BAD_FLAG)
    assert line == (
        "the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument --reasoning-config: "
        "invalid loads value: '{\"thinking_budget\": 4000}'"
    )


def test_out_of_memory_beats_the_traceback_tail() -> None:
    assert server_gone.why(JOURNAL_OOM).startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert "Main process exited" not in " ".join(server_gone.error_lines(JOURNAL_OOM))


def test_a_journal_without_an_error_says_so() -> None:
    assert "no error line" in server_gone.one_line("the service is stopped", "INFO loading\n")


def fake_run(show: str, journal: str):
    def run(cmd: list[str]) -> str:
        return show if cmd[0] == "systemctl" else journal

    return run


def test_the_watcher_reads_proc_first_then_systemd(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text("4242 (python3) S 1 4242 4242 0 -1\n")
    alive = server_gone.watcher("vllm.service", "4242", fake_run(EXITED_IN_START_POST, JOURNAL_BAD_FLAG), str(tmp_path))
    assert alive() is None
    (tmp_path / "4242" / "stat").write_text("4242 (python3) Z 1 4242 4242 0 -1\n")  # a zombie is gone
    assert "error: argument --reasoning-config" in (alive() or "")
    dead = server_gone.watcher("vllm.service", "4243", fake_run(EXITED_IN_START_POST, JOURNAL_BAD_FLAG), str(tmp_path))
    assert (dead() or "").startswith("the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument")


def test_no_systemd_to_ask_leaves_it_to_health() -> None:
    assert server_gone.watcher("vllm.service", None, fake_run("", ""))() is None


def test_the_wait_for_health_stops_at_once_when_the_server_died(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_probe, "request", lambda *a, **k: (0, "connection refused"))
    monkeypatch.setattr(service_probe.time, "sleep", lambda s: None)
    polls = iter([None, None, "the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument X"])
    result = service_probe.prove("http://127.0.0.1:9", "k", "m", 900, 2, 200, lambda t: None, lambda: next(polls))
    assert result.check == "exited"
    assert result.detail.startswith("the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument X")


def test_without_a_unit_the_wait_is_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_probe, "request", lambda *a, **k: (0, "connection refused"))
    result = service_probe.prove("http://127.0.0.1:9", "k", "m", 0.01, 2, 200, lambda t: None)
    assert (result.check, result.detail) == ("health", "not healthy within 0s")


def test_the_start_check_fails_its_start_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vllm_rig.host import start_check

    monkeypatch.setattr(start_check, "restarts", lambda unit: 0)
    monkeypatch.setattr(server_gone, "_run", fake_run(EXITED_IN_START_POST, JOURNAL_BAD_FLAG))
    monkeypatch.setattr(service_probe, "request", lambda *a, **k: (0, "connection refused"))
    monkeypatch.setenv("MAINPID", "999999999")
    said: list[str] = []
    monkeypatch.setattr("builtins.print", lambda text, **k: said.append(text))
    rc = start_check.main(
        ["--unit", "vllm.service", "--base-url", "http://127.0.0.1:9", "--model", "m"]
        + ["--result", str(tmp_path / "start-check.json"), "--timeout", "900"]
    )
    assert rc == 1
    assert "start 1 of 3 failed: the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument" in said[-1]
    assert '"check": "exited"' in (tmp_path / "start-check.json").read_text()
