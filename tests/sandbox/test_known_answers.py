"""The rig's known-answer checks (vllm_rig/host/service_probe.py) against the stand-in server's HTTP side,
in process: right answers pass, each fault knob fails the check it should, with the answer in the detail.
The server is the default profile's: thinking on by default, a thinking budget of 4000 tokens.
The same pair meets for real (systemd, the deployed unit) in tests/e2e/test_day_two.py."""

from __future__ import annotations

import json
import sys
import threading
import types
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.sandbox.fixtures import forge
from vllm_rig.host import service_probe

BUDGET = 4000  # group_data/all.py default_thinking_token_budget


@pytest.fixture(scope="module")
def knob_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("knobs") / "forge.json"


@pytest.fixture(scope="module")
def server(knob_file: Path) -> Iterator[str]:
    """The stand-in's handler on a loopback port, with the seed's parser flags and MTP 3."""
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_STANDIN_KNOBS", str(knob_file))
    mp.setenv("VLLM_STANDIN_DECODE_TPS", "5000")
    mp.setenv("VLLM_STANDIN_PREFILL_TPS", "500000")
    mp.setenv("VLLM_DEFAULT_THINKING_TOKEN_BUDGET", str(BUDGET))  # group_data/all.py, the fork's variable
    sys.path.insert(0, str(forge.FORK_TREE))
    try:
        from vllm.entrypoints.openai import protocol
        from vllm.standin.engine import Engine

        args = types.SimpleNamespace(
            enable_auto_tool_choice=True,
            tool_call_parser="qwen3_xml",
            reasoning_parser="qwen3",
            default_chat_template_kwargs={"enable_thinking": True},
            disable_uvicorn_access_log=True,
            enable_prompt_tokens_details=False,
            model="/models/m",
        )
        engine = Engine(
            model_name="m",
            max_model_len=100000,
            max_num_seqs=4,
            spec_k=3,
            prefix_caching=True,
            kv_capacity=207692,
            log_stats=False,
        )
        state = types.SimpleNamespace(
            args=args,
            engine=engine,
            max_model_len=100000,
            served_names=["m"],
            api_keys=["k"],
            created=0,
            # read once at start, as the stand-in's api_server does (the fork's serving.py)
            default_thinking_token_budget=protocol.default_thinking_token_budget(),
        )
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), protocol.make_handler(state))
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
        httpd.shutdown()
    finally:
        sys.path.remove(str(forge.FORK_TREE))
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
        mp.undo()


def knobs(path: Path, **values: object) -> None:
    path.write_text(json.dumps(values))


def test_a_right_server_passes_every_check(server: str, knob_file: Path) -> None:
    knobs(knob_file)
    results = service_probe.known_answers(server, "k", "m", needle_words=3000, timeout=30)
    assert [(r.check, r.ok) for r in results] == [("arithmetic", True), ("needle", True), ("tool_call", True)]
    assert "streamed get_weather" in results[2].detail and "finish_reason tool_calls" in results[2].detail


def test_wrong_answers_fail_the_sum_and_the_needle_with_the_answer(server: str, knob_file: Path) -> None:
    knobs(knob_file, wrong_answers=True)
    result = service_probe.check_arithmetic(server, "k", "m", timeout=30)
    assert not result.ok and "answered '1+2=3'" in result.detail
    result = service_probe.check_needle(server, "k", "m", 500, timeout=30)
    assert not result.ok and result.check == "needle" and "expected" in result.detail


def test_a_stream_that_drops_the_tool_call_fails_the_tool_check(server: str, knob_file: Path) -> None:
    knobs(knob_file, stream_drops_tool_calls=True)
    result = service_probe.check_tool_call(server, "k", "m", timeout=30)
    assert not result.ok and "no tool_calls in the stream (finish_reason stop)" in result.detail
    assert "<tool_call>" in result.detail


def test_the_key_is_needed(server: str, knob_file: Path) -> None:
    knobs(knob_file)
    result = service_probe.check_arithmetic(server, "wrong", "m", timeout=30)
    assert not result.ok and "HTTP 401 (the API key was refused)" in result.detail


def _thinks_to_the_budget(knob_file: Path) -> None:
    """A model that, left to think, thinks past the budget: its reasoning ends only where the budget cuts it."""
    knobs(knob_file, thinking_tokens=2 * BUDGET)


def test_the_thinking_knob_sets_how_long_a_thinking_request_thinks(server: str, knob_file: Path) -> None:
    """Without the knob the stand-in thinks natural_tokens / 3; with it as long as the knob says, up to the
    server's budget; a request's own budget or enable_thinking false still wins."""

    def reasoning_tokens(**extra: object) -> int:
        body = {"model": "m", "messages": [{"role": "user", "content": "Explain NVLink."}], **extra}
        status, text = service_probe.request(server, "/v1/chat/completions", "k", body, timeout=30)
        assert status == 200, text
        message = json.loads(text)["choices"][0]["message"]
        return sum(-(-len(word) // 4) for word in (message.get("reasoning_content") or "").split())

    knobs(knob_file)
    assert 0 < reasoning_tokens() < 40
    knobs(knob_file, thinking_tokens=300)
    assert 300 <= reasoning_tokens() < 310
    _thinks_to_the_budget(knob_file)
    assert reasoning_tokens() == BUDGET
    assert reasoning_tokens(thinking_token_budget=100) == 100
    assert reasoning_tokens(chat_template_kwargs={"enable_thinking": False}) == 0
    assert reasoning_tokens(chat_template_kwargs={"enable_thinking": None}) == BUDGET  # None keeps the default


def test_every_proof_passes_against_a_model_that_thinks_to_the_budget(server: str, knob_file: Path) -> None:
    """The start check's whole proof (generate, warm-up, the known answers) on a model that would think for
    the server's whole budget: every request turns thinking off for itself, so each answer comes."""
    _thinks_to_the_budget(knob_file)
    said: list[str] = []
    result = service_probe.prove(server, "k", "m", timeout=30, warmup=2, needle_words=3000, say=said.append)
    assert result.ok and result.check == "tool_call", (result, said)
    assert [line.split(":")[0] for line in said if line.startswith("check ")] == [
        f"check {name}" for name in service_probe.CHECKS
    ]


def test_the_old_tool_call_request_fails_against_a_model_that_thinks_to_the_budget(
    server: str, knob_file: Path
) -> None:
    """The request shape the tool-call check sent before (the server's thinking default, max_tokens 2048): the
    reasoning fills max_tokens before the call, so no tool_calls come and the start check would fail."""
    _thinks_to_the_budget(knob_file)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}],
        "tools": [service_probe.WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 2048,
        "stream": True,
    }
    status, events, _ = service_probe.stream_events(server, "k", body, timeout=30)
    deltas = [choice.get("delta") or {} for event in events for choice in event.get("choices") or []]
    finishes = [choice.get("finish_reason") for event in events for choice in event.get("choices") or []]
    assert status == 200 and not any(delta.get("tool_calls") for delta in deltas)
    assert "length" in finishes
