"""The service probe's chat check on the two real message shapes: upstream vLLM 0.21.0 puts the thinking part in
`reasoning` (vllm-project/vllm PR #33402 removed `reasoning_content`), the fork's line in `reasoning_content`
(its CHANGELOG v0.1.10). A thinking model's short answer can be reasoning only (content null, finish length)."""

from __future__ import annotations

import json

import pytest

from vllm_rig.host import service_probe


def _response(message: dict) -> str:
    # The non-streamed ChatCompletionResponse as vLLM's protocol serialises it (fields as in its pydantic model).
    return json.dumps(
        {
            "id": "chatcmpl-9f1c",
            "object": "chat.completion",
            "created": 1767312000,
            "model": "qwen-local",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 14, "total_tokens": 30, "completion_tokens": 16},
        }
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None, "reasoning": "Okay, the user asks for a greeting.", "tool_calls": []},
        {"role": "assistant", "content": None, "reasoning_content": "Okay, the user asks for a greeting."},
        {"role": "assistant", "content": "Hello!", "reasoning_content": None},
    ],
    ids=["upstream-0.21-reasoning", "fork-reasoning_content", "content"],
)
def test_a_short_thinking_answer_is_text_on_either_line(monkeypatch: pytest.MonkeyPatch, message: dict) -> None:
    monkeypatch.setattr(service_probe, "request", lambda *a, **k: (200, _response(message)))
    assert service_probe.chat("http://127.0.0.1:9", None, "qwen-local", "Say hello.", 16) == (
        True,
        "generated 16 tokens",
    )


def test_an_empty_message_is_still_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = {"role": "assistant", "content": "", "reasoning": None, "reasoning_content": None}
    monkeypatch.setattr(service_probe, "request", lambda *a, **k: (200, _response(empty)))
    assert service_probe.chat("http://127.0.0.1:9", None, "qwen-local", "Say hello.", 16) == (
        False,
        "chat completion returned no text",
    )


def test_every_proof_request_turns_thinking_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default profile thinks by default with a 4000-token budget; a model that thinks that long would fill
    max_tokens before its answer. So each request of the proof (generate, warm-ups, the three known answers)
    carries chat_template_kwargs enable_thinking false, which the server lays over its default."""
    sent: list[dict] = []

    def request(base: str, path: str, key: str | None, body: dict | None = None, timeout: float = 60):
        if path == "/health":
            return 200, ""
        if path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "qwen-local"}]})
        assert body is not None
        sent.append(body)
        prompt = body["messages"][-1]["content"]
        answer = "Hello"
        if prompt.startswith("What is "):
            a, b = prompt.split()[2], prompt.split()[4].rstrip("?")
            answer = str(int(a) + int(b))
        elif "vault code is " in prompt:
            answer = prompt.split("vault code is ")[1].split(".")[0]
        return 200, _response({"role": "assistant", "content": answer})

    def stream_events(base: str, key: str | None, body: dict, timeout: float):
        sent.append(body)
        call = {"index": 0, "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        return 200, [{"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}], ""

    monkeypatch.setattr(service_probe, "request", request)
    monkeypatch.setattr(service_probe, "stream_events", stream_events)
    result = service_probe.prove("http://127.0.0.1:9", "k", "qwen-local", 5, 2, 200, lambda text: None)
    assert result.ok and result.check == "tool_call", result
    assert len(sent) == 1 + 2 + len(service_probe.CHECKS)  # generate, two warm-ups, the checks
    for body in sent:
        assert body["chat_template_kwargs"] == {"enable_thinking": False}, body
        assert "thinking_token_budget" not in body  # refused by some runners (service_probe.NO_THINKING)
    assert sent[-1]["stream"] is True and sent[-1]["tools"] == [service_probe.WEATHER_TOOL]


def test_the_watchdogs_question_turns_thinking_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog asks service_probe.check_arithmetic each round: thinking off as well."""
    sent: list[dict] = []

    def request(base: str, path: str, key: str | None, body: dict | None = None, timeout: float = 60):
        assert body is not None
        sent.append(body)
        return 200, _response({"role": "assistant", "content": "2"})

    monkeypatch.setattr(service_probe, "request", request)
    service_probe.check_arithmetic("http://127.0.0.1:9", "k", "qwen-local", 5)
    assert sent and sent[0]["chat_template_kwargs"] == {"enable_thinking": False}
