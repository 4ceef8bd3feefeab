"""Service stage on the sandbox: the whole deploy to a serving box, the API key, restarts on change only, a
failing runtime build that the service rides out, the seed's benchmark against the stand-in server, and the
service coming back after a SIGKILL."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import deploy, fresh, keep_serving, unit_span
from tests.sandbox import paths
from tests.sandbox.fixtures import forge

pytestmark = pytest.mark.sandbox
MODEL = "qwen-local"


def _chat(key: str | None) -> tuple[int, dict]:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{service.port()}/v1/chat/completions", body.encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, {}


def test_whole_deploy_serves_and_demands_the_key(rig: Rig) -> None:
    fresh(rig)
    run = deploy(rig, "-vv", "deploy.py")  # -vv: pyinfra prints every command, the key's making among them
    assert run.ok, run.log[-3000:]
    assert ">>> " in run.log  # -vv did print the commands
    assert "service_probe: generated" in run.log  # the deploy proved generation, not just /health
    assert rig.ssh("rig1", "systemctl is-active vllm").strip() == "active"
    status, answer = _chat(service.api_key(rig))
    assert status == 200 and answer["choices"][0]["message"]
    assert _chat(None)[0] == 401 and _chat("wrong")[0] == 401
    assert rig.ssh("rig1", "stat -c '%a %U %G' /etc/vllm-rig/vllm.env").split() == ["640", "root", "vllm"]
    key = service.api_key(rig)
    shown = rig.ssh("rig1", "systemctl show vllm -p ExecStart -p Environment; ps -eo args")
    assert key not in shown and key not in run.log
    # Kept for the modules that only add to a serving box (tests/e2e/deploys.py serving_rig); the next tests here
    # then start from the box booted again, as those modules do.
    keep_serving(rig)


def test_second_run_changes_nothing_at_about_one_command_per_operation(rig: Rig) -> None:
    run = rig.pyinfra("deploy.py", "--json", "--debug")  # --debug logs each remote command
    operations = json.loads(run.stdout)["results"]["operations"]
    assert run.returncode == 0 and [op["name"] for op in operations if op.get("success")] == []
    commands = run.stderr.count("Running command on ")
    print(f"\nno-op re-run: {len(operations)} operations, {commands} remote commands")
    assert 0 < commands <= 1.2 * len(operations)  # batched facts; see benchmarks/noop.py for the times


def test_a_changed_flag_restarts_and_proves_again(rig: Rig) -> None:
    pid = rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip()
    run = deploy(rig, "deploy.py", data={"max_num_batched_tokens": 2048})
    assert run.ok, run.log[-3000:]
    assert any("Restart vllm" in name for name in run.changed) and "service_probe: generated" in run.log
    assert rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip() != pid
    assert "--max-num-batched-tokens 2048" in rig.ssh("rig1", "systemctl show vllm -p ExecStart")


def test_a_failing_build_keeps_the_old_runtime_serving(rig: Rig) -> None:
    current = rig.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    pid = rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip()
    broken = forge.manifest()[forge.FORK]["broken"]  # a fork commit whose C source does not compile
    forge.write_knobs(build_seconds=8)  # the build takes its time before the compiler fails
    since = time.time()
    try:
        with service.Poller(service.api_key(rig)) as poller:
            run = deploy(rig, "deploy.py", data={"max_num_batched_tokens": 2048, "fork_ref": broken})
            time.sleep(2)  # and a few requests after the failed run
    finally:
        forge.write_knobs(build_seconds=2)
    assert not run.ok and "runtime build failed: step compile: compiling the fork failed" in run.log
    assert "error: expected expression" in run.log  # the compiler's own line, from the log's tail
    assert "`current` is unchanged" in run.log
    start, end = unit_span(rig, "vllm-rig-build-*", since)  # the failed build, by the host's journal
    during = [p for p in poller.polls if start <= p.at <= end]
    print(f"\nfailing build ({end - start:.1f}s): {len(poller.polls)} requests, {len(during)} during the build")
    assert len(during) >= 10 and end - start >= 8, (len(during), end - start)
    assert poller.unanswered() == [] and {p.detail for p in poller.polls} == {MODEL}
    # The same process, on the same runtime, serves on.
    assert rig.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current
    assert rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip() == pid
    assert _chat(service.api_key(rig))[0] == 200


def test_bench_reports_the_standin_rates(rig: Rig) -> None:
    forge.write_knobs(prefill_tps=5000, decode_tps=400, mtp_acceptance=0.75)
    try:
        run = deploy(
            rig,
            "tasks/bench.py",
            data={"max_num_batched_tokens": 2048, "bench_sizes": "4000:2:201", "bench_label": "e2e"},
        )
        assert run.ok, run.log[-3000:]
        result = json.loads((paths.REPO / "bench-results" / "rig1-e2e.json").read_text())
        chart = (paths.REPO / "bench-results" / "rig1-e2e.png").read_bytes()
        assert chart[:8] == b"\x89PNG\r\n\x1a\n" and len(chart) > 20_000  # the run's chart, beside its JSON
    finally:
        forge.write_knobs(prefill_tps=1300, decode_tps=85, mtp_acceptance=0.75)
    assert len(result["runs"]) == 2
    for r in result["runs"]:
        assert forge.rate_reads_back(r["prefill_tps"], 5000), r
        assert forge.decode_reads_back(r["decode_tps"], 400, r["completion_tokens"]), r
        assert abs(r["acceptance"] - 0.75) < 0.03, r


def test_service_killed_comes_back_by_itself(rig: Rig) -> None:
    rig.ssh("rig1", "sudo systemctl kill -s KILL vllm")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(2)
        try:
            if _chat(service.api_key(rig))[0] == 200:
                return
        except OSError:
            continue
    pytest.fail("the service did not come back within 60 s after SIGKILL (Restart=always, RestartSec=10)")
