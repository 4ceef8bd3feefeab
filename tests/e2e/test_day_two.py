"""Day two on the sandbox: every start proven (deploy, a killed server, a reboot), a wrong-answering engine
given up on after the bound with the failing check named, a wedged engine restarted by the watchdog, a
foreign process on a GPU delaying and then failing a start until it is gone, and a KV cache that came up
small restarted once, and a server that exits at start said at once, the settings it last served with put back.
The tests run in order on one machine; each leaves the service proven."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import deploy, serving_rig, wait_new_boot
from tests.sandbox import machine
from tests.sandbox.fixtures import forge, nvidia_repo

pytestmark = pytest.mark.sandbox

# Short bounds so a scenario takes seconds, not the defaults' minutes; the same data on every deploy.
DATA = {
    "watchdog_interval_s": 30,
    "watchdog_failures": 2,
    "watchdog_max_restarts": 1,
    "watchdog_timeout_s": 5,
    "gpu_wait_timeout_s": 12,
    # systemd's pause before each automatic restart (default 10 s): seven of these scenarios wait through one
    # or two; what they prove (a restart happens, is counted, is bounded) does not depend on its length.
    "service_restart_sec": 3,
}
CHECK = "/var/lib/vllm-rig/start-check.json"
WATCHDOG = "/var/lib/vllm-rig/watchdog.json"


def _json(rig: Rig, path: str) -> dict:
    text = rig.ssh("rig1", f"sudo cat {path} 2>/dev/null || true").strip()
    return json.loads(text) if text else {}


def _journal(rig: Rig, since: float, unit: str = "vllm") -> str:
    return rig.ssh("rig1", f"sudo journalctl --no-pager -o cat --since=@{int(since)} -u {unit}")


def _wait(what: str, ready: Callable[[], object], timeout: float = 120, every: float = 2) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _proven_after(rig: Rig, since: float, timeout: float = 120) -> dict:
    """The start check's result once a start after `since` was proven."""

    def proven() -> dict | None:
        result = _json(rig, CHECK)
        stamp = result.get("time")
        # The stamp is whole seconds (start_check.py): one at or after `since` was written after it. A second of
        # slack let the previous test's proof, written just before, pass for this one's (seen in a full run).
        fresh_enough = stamp and datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= since
        return result if fresh_enough and result.get("ok") else None

    return _wait("a proven start", proven, timeout)  # type: ignore[return-value]


def _checks_in(journal: str) -> None:
    for check in ("arithmetic", "needle", "tool_call", "kv_cache"):
        assert f"vllm-rig-start-check: check {check}: ok" in journal, (check, journal[-3000:])


def test_a_deploy_proves_the_start_and_runs_the_watchdog(rig: Rig) -> None:
    serving_rig(rig)  # the defaults after a whole deploy; this module's settings are a change to them
    forge.write_knobs(wrong_answers=False, wedge=False, kv_cache_scale=1.0, stream_drops_tool_calls=False)
    since = time.time()
    run = deploy(rig, "deploy.py", data=DATA)
    assert run.ok, run.log[-3000:]
    assert "service_probe: check tool_call: ok: streamed get_weather" in run.log  # the deploy's own proof
    result = _proven_after(rig, since)
    assert set(result) == {"time", "ok", "check", "detail", "boot_id"} and result["check"] is None
    assert result["boot_id"] == machine.boot_id(rig.machine("rig1"))
    _checks_in(_journal(rig, since))
    assert "KV cache 207,692 tokens recorded" in _journal(rig, since)
    # A probed round: the timer, re-armed by this deploy's daemon-reload past its OnBootSec, may fire while the deploy
    # restarts the server; that round is "not probed" (the service was activating), neither a pass nor a failure.
    watchdog = _wait(
        "a watchdog round", lambda: (w := _json(rig, WATCHDOG)).get("check") != "service" and w, timeout=90
    )
    assert watchdog["ok"] is True and watchdog["failures_in_row"] == 0, watchdog
    assert "active" in rig.ssh("rig1", "systemctl is-active vllm-rig-watchdog.timer")


def test_a_killed_server_comes_back_warmed_and_proven(rig: Rig) -> None:
    since = time.time()
    rig.ssh("rig1", "sudo systemctl kill -s KILL vllm")
    _proven_after(rig, since, timeout=90)
    journal = _journal(rig, since)
    _checks_in(journal)
    assert "warm-up 2/2" in journal and "start 2 proven" in journal  # systemd's restart, counted as start 2


def test_a_reboot_comes_back_warmed_and_proven(rig: Rig) -> None:
    m = rig.machine("rig1")
    before = machine.boot_id(m)
    since = time.time()
    machine.ssh(m, "sudo systemctl reboot", check=False)
    wait_new_boot(m, before)
    result = _proven_after(rig, since, timeout=180)
    assert result["boot_id"] == machine.boot_id(m) != before
    _checks_in(_journal(rig, since))


def test_wrong_answers_restart_then_stay_down_naming_the_check(rig: Rig) -> None:
    since = time.time()
    forge.write_knobs(wrong_answers=True)
    try:
        rig.ssh("rig1", "sudo systemctl restart --no-block vllm")
        journal = _wait(
            "the start check giving up",
            lambda: (j := _journal(rig, since)) and "giving up" in j and j,
            timeout=180,
        )
        _wait(
            "the unit stopped", lambda: rig.ssh("rig1", "systemctl is-active vllm", check=False).strip() != "activating"
        )
    finally:
        forge.write_knobs(wrong_answers=False)
    lines = [line for line in journal.splitlines() if "giving up" in line]
    assert len(lines) == 1, lines
    assert "after 3 failed starts: check arithmetic failed" in lines[0] and "answered '1+2=3'" in lines[0], lines
    assert journal.count("failed check arithmetic") == 2  # starts 1 and 2 of 3, each restarted by systemd
    time.sleep(DATA["service_restart_sec"] + 7)  # well past RestartSec: nothing restarts it
    assert rig.ssh("rig1", "systemctl is-active vllm", check=False).strip() in ("inactive", "failed")
    result = _json(rig, CHECK)
    assert result["ok"] is False and result["check"] == "arithmetic" and "1+2=3" in result["detail"]
    since = time.time()
    rig.ssh("rig1", "sudo systemctl start vllm", timeout=180)  # by hand: a fresh count, and it passes now
    _proven_after(rig, since)


def test_a_wedged_engine_is_restarted_by_the_watchdog(rig: Rig) -> None:
    since = time.time()
    forge.write_knobs(wedge=True)  # /health stays 200, no completion ever finishes
    try:
        journal = _wait(
            "the watchdog's restart",
            lambda: (j := _journal(rig, since, "vllm-rig-watchdog")) and "restarting vllm.service" in j and j,
            timeout=180,
        )
    finally:
        forge.write_knobs(wedge=False)
    assert journal.count("round failed") >= 2 and "check arithmetic" in journal, journal[-2000:]
    _proven_after(rig, since, timeout=120)
    record = _wait("a passing watchdog round", lambda: (w := _json(rig, WATCHDOG)).get("ok") and w, timeout=90)
    assert record["failures_in_row"] == 0


def test_a_foreign_process_on_a_gpu_delays_then_fails_the_start_until_freed(rig: Rig) -> None:
    m = rig.machine("rig1")
    app = {"gpu": 1, "pid": 4242, "name": "/usr/bin/python3 leftover_worker.py", "used_mib": 20480}
    since = time.time()
    nvidia_repo.set_knobs(m.dir, compute_apps=[app])
    try:
        rig.ssh("rig1", "sudo systemctl restart --no-block vllm")
        journal = _wait(
            "the GPU wait failing",
            lambda: (j := _journal(rig, since)) and "vllm-rig-gpu-wait: not starting" in j and j,
            timeout=60,
        )
    finally:
        nvidia_repo.set_knobs(m.dir, compute_apps=[])
    assert "waiting for free GPUs: GPU 1 (00000000:02:00.0) is held by pid 4242" in journal
    failed = next(line for line in journal.splitlines() if "not starting" in line)
    assert "pid 4242 /usr/bin/python3 leftover_worker.py (compute, 20480 MiB)" in failed and "GPU 1" in failed
    assert "GPU KV cache size" not in journal  # the server never started on the held card
    _proven_after(rig, since, timeout=90)  # freed: systemd's next start goes on
    assert "GPUs free" in _journal(rig, since) or "vllm-rig-gpu-wait" in _journal(rig, since)


def test_a_smaller_kv_cache_restarts_once_then_warns(rig: Rig) -> None:
    since = time.time()
    forge.write_knobs(kv_cache_scale=0.5)
    try:
        rig.ssh("rig1", "sudo systemctl restart --no-block vllm")
        _proven_after(rig, since, timeout=120)
    finally:
        forge.write_knobs(kv_cache_scale=1.0)
    journal = _journal(rig, since)
    assert "check kv_cache: FAILED: KV cache 103,846 tokens, 50% below the recorded 207,692" in journal
    assert journal.count("check kv_cache: FAILED") == 1 and "WARNING: KV cache 103,846 tokens" in journal
    assert "start 2 proven" in journal  # the one restart, then it serves (and says so)


def test_streamed_tool_calls_dropped_fail_the_start_check(rig: Rig) -> None:
    """What club-3090 #145 saw with qwen3_coder and reasoning on: the call leaks into content, finish "stop"."""
    since = time.time()
    forge.write_knobs(stream_drops_tool_calls=True)
    try:
        rig.ssh("rig1", "sudo systemctl restart --no-block vllm")
        journal = _wait(
            "the tool_call check failing",
            lambda: (j := _journal(rig, since)) and "failed check tool_call" in j and j,
            timeout=90,
        )
    finally:
        forge.write_knobs(stream_drops_tool_calls=False)
    line = next(x for x in journal.splitlines() if "check tool_call: FAILED" in x)
    assert "no tool_calls in the stream (finish_reason stop)" in line and "<tool_call>" in line, line
    _proven_after(rig, since, timeout=90)  # the knob cleared: systemd's restart passes


def test_the_watchdog_is_one_setting_away_from_off(rig: Rig) -> None:
    pid = rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip()
    run = deploy(rig, "deploy.py", data={**DATA, "watchdog_enabled": False})
    assert run.ok, run.log[-3000:]
    assert rig.ssh("rig1", "systemctl is-enabled vllm-rig-watchdog.timer", check=False).strip() == "disabled"
    assert rig.ssh("rig1", "systemctl is-active vllm-rig-watchdog.timer", check=False).strip() == "inactive"
    assert rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip() == pid  # the server was left alone
    run = deploy(rig, "deploy.py", data=DATA)
    assert run.ok and rig.ssh("rig1", "systemctl is-active vllm-rig-watchdog.timer").strip() == "active"


# A flag the server's own parser refuses at start (argparse: "argument --seed: invalid int value"); the settings
# check flag names only, as a value's meaning is the server's. What the start check would otherwise wait for
# /health: service_start_timeout_s (900) less the GPU wait (DATA) and 30 s (vllm_rig/stages/service/unit.py).
BAD_FLAG = "--seed=not-a-number"
START_CHECK_BUDGET_S = 900 - DATA["gpu_wait_timeout_s"] - 30


def test_a_server_that_exits_at_start_is_said_at_once_and_the_last_settings_serve_again(rig: Rig) -> None:
    current = rig.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    since = time.time()
    started = time.monotonic()
    run = deploy(rig, "deploy.py", data={**DATA, "vllm_extra_args": [BAD_FLAG]})
    wall = time.monotonic() - started
    assert run.rc != 0 and "[rig1] Error: " in run.log, run.log[-3000:]  # the host failed (and so the run)
    # Said long before the start check's timeout, and in the server's own words, as its journal has them.
    assert wall < START_CHECK_BUDGET_S / 5, f"the deploy took {wall:.0f}s to say the server was gone"
    said = "argument --seed: invalid int value: 'not-a-number'"
    # systemctl's own "Job for vllm.service failed" comes first; the line after it is ours: the server's words and
    # that the unit and environment it served with before are back, proven by the start check.
    line = next((x for x in run.log.splitlines() if "the server exited" in x), run.error_line())
    assert said in line and "status=2/INVALIDARGUMENT" in line, line
    assert "last served with are back and serve again (start check passed); change the setting" in line, line
    assert said in _journal(rig, since)
    # This run left the box serving, without another: the same runtime, the unit without the flag, proven.
    assert rig.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current
    assert BAD_FLAG.split("=")[0] not in rig.ssh("rig1", "systemctl show vllm -p ExecStart --value")
    assert rig.ssh("rig1", "systemctl is-active vllm", check=False).strip() == "active"
    _proven_after(rig, since, timeout=5)
    # The owner's next run without the flag finds the box as it left it: nothing rebuilt, the server left alone.
    pid = rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip()
    again = deploy(rig, "deploy.py", data=DATA)
    assert again.ok, again.log[-3000:]
    assert rig.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current
    assert not [name for name in again.changed if "runtime" in name.lower() and "build" in name.lower()], again.changed
    assert rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip() == pid
    print(f"\nthe server's exit said after {wall:.1f}s of deploy (start check budget {START_CHECK_BUDGET_S}s)")
