"""The status view's parsing (vllm_rig/stages/status/report.py): /metrics through prometheus_client, tokens/s
against the last read, and a probe run for real on a machine where nothing of vllm-rig (nor systemd, nor a GPU)
is there: every field must come out filled or marked unknown with a reason."""

from __future__ import annotations

import datetime
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.gpu_xml import real_xml, rtx_xml
from tests.unit.groupdata import profile_data
from vllm_rig.core.host_package import run_from_stdin, stdin_text
from vllm_rig.stages.status import report
from vllm_rig.stages.status.facts import status_spec
from vllm_rig.validation import load_settings

STANDIN_METRICS = Path(__file__).resolve().parents[1] / "sandbox/fixtures/forge/standin_fork/vllm/standin/metrics.py"


def _standin_metrics() -> Any:
    spec = importlib.util.spec_from_file_location("standin_metrics", STANDIN_METRICS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Metrics("qwen-local", spec_tokens=3)


def _raw(metrics_text: str, at: float, since: str = "@1000") -> dict:
    return {
        "time": at,
        "commands": {
            "service": {"rc": 0, "out": f"LoadState=loaded\nActiveState=active\nActiveEnterTimestamp={since}\n"}
        },
        "files": {},
        "http": {"metrics": {"status": 200, "body": metrics_text}},
    }


def test_the_standin_exports_every_metric_the_status_reads() -> None:
    names = set(report.metric_values(_standin_metrics().render()))
    assert {report.KV_USAGE, *report.COUNTERS.values()} <= names


def test_metrics_and_tokens_per_second_since_the_last_read() -> None:
    m = _standin_metrics()
    m.add("vllm:prefix_cache_queries", 1000)
    m.add("vllm:prefix_cache_hits", 250)
    for accepted in (3, 2, 1, 3):  # 9 of 12 drafted tokens accepted
        m.spec_step(accepted)
    m.add("vllm:generation_tokens", 100)
    m.gauge_add("vllm:kv_cache_usage_perc", 0.125)
    first, read = report.metrics_section(_raw(m.render(), 2000.0), None, 1000.0)
    assert first["KV cache usage"] == "12.5%"
    assert first["prefix cache hit rate"] == "25.0% since the server started"
    assert first["MTP acceptance"] == "75.0% since the server started"
    assert first["tokens/s"] == report.Unknown("first read: run status again for tokens/s since this one")
    m.add("vllm:generation_tokens", 300)  # 300 more tokens in 10 s
    m.add("vllm:prompt_tokens", 50)
    m.spec_step(0)
    second, _ = report.metrics_section(_raw(m.render(), 2010.0), read, 1000.0)
    assert second["tokens/s"] == "30.0 generated, 5.0 prompt over the last 0m 10s"
    assert second["MTP acceptance"] == "60.0% since the server started, 0.0% since the last read"
    restarted, _ = report.metrics_section(_raw(m.render(), 2020.0), read, 1500.0)
    assert restarted["tokens/s"] == report.Unknown("the server restarted since the last read")


def test_a_server_that_does_not_answer_marks_every_metric_unknown() -> None:
    raw = {"time": 1.0, "http": {"metrics": {"error": "[Errno 111] Connection refused"}}}
    fields, read = report.metrics_section(raw, None, None)
    assert read == {} and set(fields.values()) == {
        report.Unknown("/metrics does not answer: [Errno 111] Connection refused")
    }


def test_nvidia_smi_failing_is_the_gpu_fields_reason() -> None:
    # A real report's nvidia-smi after a driver upgrade without a reboot (fixtures/tool_outputs/truenas-580).
    out = (Path(__file__).parent / "fixtures/tool_outputs/truenas-580/nvidia-smi_plain.out").read_text()
    raw = {"commands": {"gpus": {"rc": 18, "out": out}}}
    assert report.gpu_rows(raw) == report.Unknown(
        "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch (a reboot loads the installed driver)"
    )
    live = rtx_xml(
        gpu0={
            "temperature_c": 41,
            "power_draw_w": 61.2,
            "clocks_mhz": {"graphics": 1350, "sm": 1350, "memory": 7000, "video": 1200},
        }
    )
    gpu, _ = report.gpu_rows({"commands": {"gpus": {"rc": 0, "out": live}}})
    assert (gpu["temperature_c"], gpu["power_draw_w"], gpu["sm_clock_mhz"], gpu["memory_mib"]) == (
        41,
        61.2,
        1350,
        22528,
    )
    assert report.gpu_rows({"commands": {"gpus": {"rc": 0, "out": "<nvidia_smi_log><gpu>"}}}) == report.Unknown(
        "nvidia-smi's output not understood: nvidia-smi -q -x did not print its XML (no element found: line 1, column"
        " 21): <nvidia_smi_log><gpu>"
    )


def test_the_live_gpu_fields_of_a_real_h100() -> None:
    """h100-xml/nvidia-smi_q_x: the status view's fields from the real XML."""
    [gpu] = report.gpu_rows({"commands": {"gpus": {"rc": 0, "out": real_xml("nvidia-smi_q_x")}}})
    assert gpu == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "temperature_c": 39.0,
        "power_draw_w": 71.81,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 345,
        "sm_clock_max_mhz": 1980,
        "memory_used_mib": 0,
        "memory_mib": 81559,
    }
    assert "GPU0 NVIDIA H100 80GB HBM3: 39 C, 72 W of 700 W, SM 345 MHz (max 1980 MHz), memory 0 MiB of 81559 MiB" in (
        report._gpu_line(gpu)
    )


def _leaves(status: dict) -> list[tuple[str, Any]]:
    out = []
    for section, fields in status["sections"].items():
        out += [(f"{section}.{name}", value) for name, value in fields.items()]
    out.append(("gpus", status["gpus"]))
    return out


def test_a_real_probe_on_a_bare_machine_fills_or_explains_every_field(tmp_path: Path) -> None:
    s = load_settings({**profile_data(), "install_root": str(tmp_path / "rig"), "vllm_port": 9})
    command = run_from_stdin("status_probe", [json.dumps(status_spec(s))], python=sys.executable)
    proc = subprocess.run(
        ["sh", "-c", command], input=stdin_text(), capture_output=True, text=True, timeout=60, check=True
    )
    raw = json.loads(proc.stdout)
    status = report.build("bare", raw, s, None)
    for name, value in _leaves(status):
        if isinstance(value, dict):
            assert set(value) == {"unknown"} and value["unknown"].strip(), name
        else:
            assert str(value).strip(), name
    sections = status["sections"]
    assert sections["runtime"]["current"] == "none" and sections["runtime"]["building"] == "no"
    assert sections["model"]["verified"] == "no: no completion marker"
    assert sections["service"]["last start check"] == "not installed"
    assert set(sections["service"]) == {"state", "uptime", "restarts since boot", "last start check", "watchdog"}
    assert sections["api"]["answers"].startswith("no: ")
    assert sections["metrics"]["tokens/s"]["unknown"].startswith("/metrics does not answer")
    first, second = report.render_table(status).splitlines()[:2]
    assert first.startswith("bare: NOT SERVING")  # the one line per box, first
    assert second.startswith("status of bare at ")
    assert json.loads(report.render_json(status))["host"] == "bare"


@pytest.mark.parametrize("output", [[], ["Traceback (most recent call last):", "SyntaxError: bad"]])
def test_a_probe_that_did_not_run_is_said_once_for_every_section(output: list[str]) -> None:
    from vllm_rig.stages.status.facts import parse_probe

    status = report.build("h", parse_probe(output), load_settings(profile_data()), None)
    assert status["gpus"]["unknown"].startswith("the status probe did not run on the host")
    assert all(v == status["gpus"] for _, v in _leaves(status))


def test_result_lines_print_only_what_the_host_wrote() -> None:
    """The records come from the host programs' own writer (start_check.result, as start_check and the
    watchdog call it): a pass names no failing check, and the view must not print "None" for it."""
    from vllm_rig.host.start_check import result

    passed = result(True, None, "proven on start 1: known-answer, needle")
    line = report._result_file(json.dumps(passed), "start check")
    assert line == f"ok at {passed['time']}: proven on start 1: known-answer, needle"
    watchdog_pass = {**result(True, None, ""), "failures_in_row": 0}
    line = report._result_file(json.dumps(watchdog_pass), "watchdog")
    assert line == f"ok at {watchdog_pass['time']}, failures in a row 0"
    assert "None" not in line
    failed = result(False, "known-answer", "answered 'Lyon'")
    line = report._result_file(json.dumps(failed), "start check")
    assert line == f"FAILED at {failed['time']}: known-answer (answered 'Lyon')"


def _timer(props: str) -> dict:
    return {"commands": {"watchdog_timer": {"rc": 0, "out": props}}, "files": {}}


def test_a_watchdog_timer_waiting_for_its_first_round_is_installed_not_missing() -> None:
    """Right after a deploy the timer is loaded and active (OnBootSec/OnUnitInactiveSec: monotonic, so systemd
    gives its next run as a timespan since boot) and no round has written a result yet."""
    boot = datetime.datetime(2026, 12, 6, 7, 0, tzinfo=datetime.UTC).timestamp()
    props = (
        "LoadState=loaded\nActiveState=active\nNextElapseUSecRealtime=\n"
        "NextElapseUSecMonotonic=1h 12min 30.5s\nLastTriggerUSec=\nUptime=4300.12\n"
        f"Now={int(boot + 4300)}\n"
    )
    assert report.timer_first_check(_timer(props)) == "installed, first check at 08:12 UTC"
    realtime = props.replace("NextElapseUSecRealtime=", f"NextElapseUSecRealtime=@{int(boot + 3 * 3600 + 5 * 60)}")
    assert report.timer_first_check(_timer(realtime)) == "installed, first check at 10:05 UTC"
    unread = props.replace("1h 12min 30.5s", "soon")
    assert report.timer_first_check(_timer(unread)) == "installed, first check pending"


@pytest.mark.parametrize(
    "props",
    [
        "LoadState=not-found\nActiveState=inactive\n",  # no timer: the watchdog is not installed
        "LoadState=loaded\nActiveState=inactive\n",  # watchdog_enabled false: stopped
        "LoadState=loaded\nActiveState=active\nLastTriggerUSec=@1765000000\n",  # it ran: its result says
    ],
)
def test_only_a_waiting_timer_reads_as_a_first_check(props: str) -> None:
    assert report.timer_first_check(_timer(props)) is None


def test_the_service_section_says_first_check_until_the_first_result() -> None:
    props = "LoadState=loaded\nActiveState=active\nNextElapseUSecRealtime=@1765004400\nLastTriggerUSec=\n"
    raw = _timer(props)
    section = report.service_section(raw, load_settings(profile_data()))
    assert section["watchdog"] == "installed, first check at 07:00 UTC"
    raw["files"] = {"watchdog": json.dumps({"time": "2026-12-06T07:00:01+00:00", "ok": True})}
    assert report.service_section(raw, load_settings(profile_data()))["watchdog"].startswith("ok at ")


# --- the first line per box: serving, or NOT SERVING with why -----------------------------------------------
URL = "https://192.168.1.50:8443/v1"
# The fork refusing the upstream kind's flag while the start check waits: systemd says activating (start-post).
DEAD_SHOW = (
    "LoadState=loaded\nActiveState=activating\nSubState=start-post\nResult=success\nMainPID=0\nExecMainCode=1\n"
    "ExecMainStatus=2\nExecMainStartTimestamp=@1765008000\nActiveEnterTimestamp=@1764990000\nNRestarts=0\n"
)
DEAD_JOURNAL = (
    "usage: vllm serve [model_tag] [options]\n"
    "vllm serve: error: argument --reasoning-config: invalid loads value\n"
    "vllm.service: Main process exited, code=exited, status=2/INVALIDARGUMENT\n"
)


def _box(show: str, journal: str = "", api: dict | None = None, start_check: str | None = None) -> dict:
    return {
        "time": 1765008100.0,
        "commands": {"service": {"rc": 0, "out": show}, "journal": {"rc": 0, "out": journal}},
        "files": {"start_check": start_check},
        "http": {"api": api or {"error": "[Errno 111] Connection refused"}},
    }


def test_a_dead_server_is_not_serving_with_its_error_line() -> None:
    s = load_settings(profile_data())
    line = report.headline(_box(DEAD_SHOW, DEAD_JOURNAL), s, URL)
    assert line == (
        "NOT SERVING: the server exited (status=2/INVALIDARGUMENT): "
        "vllm serve: error: argument --reasoning-config: invalid loads value"
    )


def test_a_serving_box_says_its_model_and_url() -> None:
    s = load_settings(profile_data())
    show = "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"
    api = {"status": 200, "body": json.dumps({"data": [{"id": s.served_model_name}]}), "key_sent": True}
    assert report.headline(_box(show, "", api), s, URL) == f"serving {s.served_model_name} at {URL}"


def test_a_loading_server_is_not_serving_yet() -> None:
    s = load_settings(profile_data())
    show = "LoadState=loaded\nActiveState=activating\nSubState=start-post\nMainPID=4242\n"
    assert report.headline(_box(show), s, URL) == "NOT SERVING yet: starting, activating (start-post)"


def test_a_start_check_from_before_the_current_start_is_stale() -> None:
    """The previous start's "ok" while the server died at this start: marked stale, not read as this start's."""
    s = load_settings(profile_data())
    old_ok = json.dumps({"time": "2025-12-05T09:00:00Z", "ok": True, "check": None, "detail": "proven on start 1"})
    section = report.service_section(_box(DEAD_SHOW, DEAD_JOURNAL, start_check=old_ok), s)
    assert section["last start check"].startswith("stale (from before the current start): ok at 2025-12-05T09:00:00Z")
    fresh = old_ok.replace("2025-12-05T09:00:00Z", "2025-12-06T08:01:00Z")  # after 1765008000 (08:00:00)
    assert report.service_section(_box(DEAD_SHOW, start_check=fresh), s)["last start check"].startswith("ok at ")


def test_the_chat_page_line_says_whether_it_answers_and_where() -> None:
    s = load_settings({**profile_data(), "chat_page": True, "chat_page_port": 8445, "chat_page_backend_port": 3080})
    assert status_spec(s)["http"]["chat_page"] == {"url": "http://127.0.0.1:3080/health"}
    assert "chat_page" not in status_spec(load_settings(profile_data()))["http"]
    url = "https://box.lan:8443/v1"
    up = report.chat_page_section({"http": {"chat_page": {"status": 200, "body": '{"status":true}'}}}, s, url)
    assert up == {"answers": "yes, at https://box.lan:8445/"}
    down = report.chat_page_section({"http": {"chat_page": {"error": "[Errno 111] Connection refused"}}}, s, url)
    assert down["answers"].startswith("no: [Errno 111] Connection refused") and "journalctl" in down["answers"]
    failing = report.chat_page_section({"http": {"chat_page": {"status": 502}}}, s, url)
    assert failing["answers"].startswith("no: HTTP 502")
    raw = _raw("", 2000.0) | {"http": {"chat_page": {"status": 200}}}
    assert "chat page" in report.build("box", raw, s, None, url)["sections"]
    assert "chat page" not in report.build("box", raw, load_settings(profile_data()), None, url)["sections"]
