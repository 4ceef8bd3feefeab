"""The stand-in server behaves as vLLM 0.27.1's real server where the rig depends on it (tests/STANDIN_SOURCES.md,
section "Server and parser", cites the wheel's file and line for each): it refuses connections until its engine is
up, /health is 503 for a dead engine, a dead engine's failure comes inside a stream at HTTP 200, the key guards
/v1, /v2 and /inference, and the thinking field is `reasoning` on the upstream kind, `reasoning_content` too on
the fork. The clients (service_probe, bench) are run against it where they read those behaviours.
No rig: the server runs from a copy of the stand-in's source (tests/sandbox/test_bench.py's runtime).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.test_bench import API_KEY, FAST, SERVER_ARGS, StandIn, _free_port, _runtime, _wait_healthy
from vllm_rig.host import bench, service_probe

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_SRC = ROOT / "tests" / "sandbox" / "fixtures" / "pkg_index" / "src" / "vllm_upstream" / "vllm"


def _start(root: Path, startup_s: float = 0.1, upstream: bool = False) -> tuple[subprocess.Popen, StandIn]:
    env = _runtime(root)
    if upstream:  # the release's own files over the fork's, as the upstream stand-in wheel lays them
        shutil.copytree(UPSTREAM_SRC, root / "src" / "vllm", dirs_exist_ok=True)
        (root / "src" / "vllm" / "_C_stable_libtorch.py").write_text('"""Stub of the release\'s extension."""\n')
    port = _free_port()
    server = StandIn(f"http://127.0.0.1:{port}", root / "knobs.json", root / "server.log")
    server.knobs.write_text(json.dumps({**FAST, "startup_seconds": startup_s, "log_stats_interval": 60}))
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--model", str(root / "model"), *SERVER_ARGS]
    with server.log.open("w") as log:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, server


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    proc, server = _start(tmp_path_factory.mktemp("fork"))
    try:
        _wait_healthy(proc, server.url, server.log)
        yield server
    finally:
        _stop(proc)


def _get(url: str, key: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def _chat(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_connections_are_refused_until_the_engine_is_up(tmp_path: Path) -> None:
    """0.27.1 binds its socket early but uvicorn listens only once the engine is built (api_server.py:578-593,
    :636-642, :778-783): a client meanwhile sees a refusal, not a hang."""
    proc, server = _start(tmp_path, startup_s=4.0)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 20
        while "Starting to load model" not in server.log.read_text():  # the engine is starting
            assert proc.poll() is None and time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.05)
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        _wait_healthy(proc, server.url, server.log)
    finally:
        _stop(proc)


def test_the_key_guards_v1_v2_and_inference_only(fork: StandIn) -> None:
    """GUARDED_PREFIX (0.27.1 entrypoints/serve/utils/server_utils.py:42): 401 before any route lookup."""
    for path in ("/v1/models", "/v2/anything", "/inference/v1/generate"):
        assert _get(fork.url + path) == 401, path
    assert _get(fork.url + "/v1/models", API_KEY) == 200
    for path in ("/health", "/version", "/metrics"):
        assert _get(fork.url + path) == 200, path


def test_a_dead_engine_is_503_on_health_and_its_failure_is_quoted_by_the_clients(fork: StandIn) -> None:
    """A dead engine core: /health 503 (instrumentator/health.py:22-33); a request 500 with EngineDeadError's
    message; a streamed one HTTP 200 with an error event (chat_completion/serving.py:837-842). The start check's
    tool call and bench name the server's message, not a missing tool call or usage."""
    fork.knobs.write_text(json.dumps({**FAST, "startup_seconds": 0.1, "log_stats_interval": 60, "engine_dead": True}))
    try:
        assert _get(fork.url + "/health") == 503
        tool = service_probe.check_tool_call(fork.url, API_KEY, "qwen-local", timeout=30)
        assert not tool.ok and "EngineCore encountered an issue" in tool.detail, tool
        assert "InternalServerError" in tool.detail and "no tool_calls" not in tool.detail
        sum_check = service_probe.check_arithmetic(fork.url, API_KEY, "qwen-local", timeout=30)
        assert not sum_check.ok and "HTTP 500: EngineCore encountered an issue" in sum_check.detail, sum_check
        srv = bench.Server(fork.url, API_KEY, 30)
        with pytest.raises(bench.BenchError, match="inside the stream: EngineCore encountered an issue"):
            bench.stream_chat(srv, bench.chat_body("qwen-local", "hi", 8, False, stream=True))
    finally:
        fork.set_rates(FAST)
    assert _get(fork.url + "/health") == 200


THINKING = {"model": "qwen-local", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


def test_the_fork_writes_reasoning_content_beside_reasoning(fork: StandIn) -> None:
    message = _chat(fork.url, THINKING)["choices"][0]["message"]
    assert message["reasoning_content"] and message["reasoning"] == message["reasoning_content"], message


def test_the_upstream_kind_writes_reasoning_only(tmp_path: Path) -> None:
    """0.27.1: ChatMessage.reasoning and DeltaMessage.reasoning (chat_completion/protocol.py:71,
    engine/protocol.py:397); reasoning_content is only read from requests (protocol.py:515-531)."""
    proc, server = _start(tmp_path, upstream=True)
    try:
        _wait_healthy(proc, server.url, server.log)
        message = _chat(server.url, THINKING)["choices"][0]["message"]
        assert message["reasoning"] and "reasoning_content" not in message, message
        streamed = _chat_stream(server.url, {**THINKING, "stream": True})
        assert any(d.get("reasoning") for d in streamed) and not any("reasoning_content" in d for d in streamed)
        assert _get(server.url + "/cohere/v2/chat") == 401  # 0.27.1 adds /cohere to the guarded prefixes
    finally:
        _stop(proc)


def _chat_stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    deltas = []
    with urllib.request.urlopen(req, timeout=30) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                for choice in json.loads(line[5:]).get("choices") or []:
                    deltas.append(choice.get("delta") or {})
    return deltas
