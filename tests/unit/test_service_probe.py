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
