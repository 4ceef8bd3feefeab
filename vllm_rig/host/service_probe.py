#!/usr/bin/env python3
"""Is the vLLM service really serving, and serving right? Run on the host after a (re)start.

    python3 vllm-rig-host.pyz service_probe --base-url http://127.0.0.1:8000 --model qwen-local
        --env-file /etc/vllm-rig/vllm.env [--timeout 900] [--warmup 2] [--needle-words 6000]

1. waits for /health (the first start compiles for minutes), printing progress;
2. /v1/models must list the served model (a listed model is not proof of generation, so:)
3. one real chat completion with the API key must return generated text;
4. warm-up requests, so the first user's request does not pay for JIT compilation;
5. known-answer checks (CHECKS), with the server as configured (MTP on): a sum, a needle from a long
   prompt, and a streamed tool call that must arrive parsed as a tool call.
Every one of these requests turns thinking off for itself (NO_THINKING), whatever the server's default.
Exit 0 serving, 1 answering wrongly (HTTP error, empty generation, model missing, a wrong answer), 2 not up
in time, 3 the server died (with --unit: its unit failed or its main process is gone; said at once, with the
server's last error line from the journal, server_gone.py). The deploy's proof runs this; the start check
(start_check.py) and the watchdog (watchdog.py) import it from the same host package, so every start and every
watchdog round asks the same questions.
The key is read from the env file (VLLM_API_KEY=...) or the environment, never from the command line, and
never printed. Standard library only: it runs with the host's python3.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import server_gone
from .server_client import TEXT_KEYS, error_text, one_line, open_request, read_key, request, server_error, sse_events

# The tool the tool-call check offers; a working server streams a call to it with {"city": "Paris"}.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
# The chat_template_kwargs of every proof request: thinking off, so the answer comes within max_tokens even
# where the server thinks by default (--default-chat-template-kwargs enable_thinking true) up to a budget of
# thousands of tokens. Both kinds lay a request's kwargs over the server's default key by key (vLLM 0.27.1
# renderers/params.py ChatParams.with_defaults -> merge_kwargs; the fork's chat_completion/serving.py makes the
# same call). A small thinking_token_budget would keep reasoning on for the tool call (club-3090 saw qwen3_coder
# drop streamed calls only with reasoning on), but it is not honoured everywhere with MTP: 0.27.1 refuses a
# request's budget with HTTP 400 on the V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1) and without a reasoning
# parser (v1/engine/input_processor.py); V2 runners that take it skip it under speculative decoding (vLLM
# #54906), V1 runners of 0.19 did too (#39573), and the fork (0.21.0 base) was not shown to enforce it with MTP.
NO_THINKING = {"enable_thinking": False}


@dataclass(frozen=True)
class Result:
    check: str
    ok: bool
    detail: str  # one line: what was asked, what came back


# What a wait asks between its polls: None while the server may still come up, else the line that says why it
# will not (server_gone.watcher: the unit's main process gone or the unit failed, with the server's error line).
Gone = Callable[[], "str | None"]


def wait_up(base: str, timeout: float, say: Callable[[str], None], gone: Gone | None = None) -> str | None:
    """None once /health answers 200; else why not: the server died (said at once) or the timeout passed."""
    start = time.monotonic()
    last_note = 0.0
    while time.monotonic() - start < timeout:
        status, _ = request(base, "/health", None, timeout=5)
        if status == 200:
            say(f"healthy after {time.monotonic() - start:.0f}s")
            return None
        died = gone() if gone is not None else None
        if died:
            return f"{died} (after {time.monotonic() - start:.0f}s)"
        if time.monotonic() - last_note >= 15:
            say(f"waiting for {base}/health ({time.monotonic() - start:.0f}s of {timeout:.0f}s)")
            last_note = time.monotonic()
        time.sleep(2)
    return f"not healthy within {timeout:.0f}s"


def completion(
    base: str, key: str | None, model: str, prompt: str, max_tokens: int, timeout: float = 600, kwargs=None
) -> tuple[bool, str, dict]:
    """(ok, one-line detail, message) of a non-streamed chat completion."""
    body: dict = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    if kwargs is not None:
        body["chat_template_kwargs"] = kwargs
    status, text = request(base, "/v1/chat/completions", key, body, timeout=timeout)
    if status != 200:
        hint = " (the API key was refused)" if status == 401 else ""
        return False, f"HTTP {status}{hint}: {error_text(text)}", {}
    answer = json.loads(text)
    message = answer["choices"][0]["message"]
    tokens = (answer.get("usage") or {}).get("completion_tokens", "?")
    return True, f"generated {tokens} tokens", message


def chat(base: str, key: str | None, model: str, prompt: str, max_tokens: int) -> tuple[bool, str]:
    ok, detail, message = completion(base, key, model, prompt, max_tokens, kwargs=NO_THINKING)
    if not ok:
        return False, f"chat completion answered {detail}"
    generated = "".join(message.get(key) or "" for key in TEXT_KEYS)
    if not generated.strip():
        return False, "chat completion returned no text"
    return True, detail


# --- the known-answer checks --------------------------------------------------------------------------------
def check_arithmetic(base: str, key: str | None, model: str, timeout: float = 600, rng=random) -> Result:
    a, b = rng.randint(100, 899), rng.randint(100, 899)
    prompt = f"What is {a} + {b}? Reply with the number only."
    ok, detail, message = completion(base, key, model, prompt, 64, timeout, NO_THINKING)
    if not ok:
        return Result("arithmetic", False, f"{a}+{b}: {detail}")
    content = (message.get("content") or "").strip()
    digits = "".join(ch if ch.isdigit() else " " for ch in content).split()
    if str(a + b) in digits:
        return Result("arithmetic", True, f"{a}+{b} -> {a + b}")
    return Result("arithmetic", False, f"{a}+{b}: expected {a + b}, answered {one_line(content, 80)!r}")


def needle_prompt(code: str, words: int, rng=random) -> str:
    filler = ["The", "river", "keeps", "moving", "past", "old", "stone", "walls", "and", "quiet", "fields."]
    half = [filler[i % len(filler)] for i in range(words // 2)]
    rng.shuffle(half)
    text = " ".join(half) + f" The vault code is {code}. " + " ".join(reversed(half))
    return f"{text}\n\nWhat is the vault code mentioned above? Reply with the code only."


def check_needle(base: str, key: str | None, model: str, words: int, timeout: float = 600, rng=random) -> Result:
    code = str(rng.randint(100000, 999999))
    ok, detail, message = completion(base, key, model, needle_prompt(code, words, rng), 32, timeout, NO_THINKING)
    if not ok:
        return Result("needle", False, f"{words}-word prompt: {detail}")
    content = (message.get("content") or "").strip()
    if code in content:
        return Result("needle", True, f"found {code} in a {words}-word prompt")
    return Result("needle", False, f"{words}-word prompt: expected {code}, answered {one_line(content, 80)!r}")


def stream_events(base: str, key: str | None, body: dict, timeout: float) -> tuple[int, list[dict], str]:
    """(HTTP status, the parsed `data:` events, error text) of a streamed request."""
    events: list[dict] = []
    try:
        with open_request(base, "POST", "/v1/chat/completions", key, body, timeout) as resp:
            if resp.status != 200:
                return resp.status, events, resp.read().decode(errors="replace")
            events += (chunk for _, chunk in sse_events(resp))
            return resp.status, events, ""
    except (OSError, http.client.HTTPException, ValueError) as err:
        return 0, events, str(err)


def check_tool_call(base: str, key: str | None, model: str, timeout: float = 600) -> Result:
    """A streamed request with one tool offered must stream delta.tool_calls that assemble to the call."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 2048,
        "stream": True,
        "chat_template_kwargs": NO_THINKING,
    }
    status, events, error = stream_events(base, key, body, timeout)
    if status != 200:
        return Result("tool_call", False, f"streamed request answered HTTP {status}: {error_text(error)}")
    for event in events:  # a failure after HTTP 200 comes as an error event (then [DONE]): the server's words
        said = server_error(event)
        if said is not None:
            return Result("tool_call", False, f"the server failed inside the stream: {one_line(said, 140)}")
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    content, finish = "", None
    for event in events:
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                function = call.get("function") or {}
                if function.get("name"):
                    names[index] = function["name"]
                arguments[index] = arguments.get(index, "") + (function.get("arguments") or "")
            finish = choice.get("finish_reason") or finish
    if not names:
        return Result(
            "tool_call",
            False,
            f"no tool_calls in the stream (finish_reason {finish}); content: {one_line(content, 100)!r}",
        )
    try:
        args = json.loads(arguments.get(0) or "{}")
    except ValueError:
        return Result("tool_call", False, f"{names.get(0)} with arguments that are not JSON: {arguments.get(0)!r}")
    if names.get(0) != "get_weather" or "paris" not in str(args.get("city", "")).lower():
        return Result("tool_call", False, f"expected get_weather(city=Paris), streamed {names.get(0)}({args})")
    return Result("tool_call", True, f"streamed get_weather({json.dumps(args)}), finish_reason {finish}")


CHECKS = ("arithmetic", "needle", "tool_call")


def known_answers(base: str, key: str | None, model: str, needle_words: int, timeout: float = 600) -> list[Result]:
    """Every check in order; stops at the first failure (its Result is last)."""
    results = []
    for run in (
        lambda: check_arithmetic(base, key, model, timeout),
        lambda: check_needle(base, key, model, needle_words, timeout),
        lambda: check_tool_call(base, key, model, timeout),
    ):
        results.append(run())
        if not results[-1].ok:
            break
    return results


def prove(
    base: str,
    key: str | None,
    model: str,
    timeout: float,
    warmup: int,
    needle_words: int,
    say,
    gone: Gone | None = None,
) -> Result:
    """Everything a start must show, in order; the first failure, or the last check passed. With `gone`, a server
    that dies is said at once (check "exited"), in the wait for /health and after a failed request."""
    outcome = _prove(base, key, model, timeout, warmup, needle_words, say, gone)
    if outcome.ok or outcome.check in ("health", "exited") or gone is None:
        return outcome
    died = gone()  # a request failed: was it because the server died under it?
    return Result("exited", False, f"{died}; {outcome.check}: {outcome.detail}") if died else outcome


def _prove(
    base: str, key: str | None, model: str, timeout: float, warmup: int, needle_words: int, say, gone: Gone | None
) -> Result:
    waited = wait_up(base, timeout, say, gone)
    if waited is not None:
        return Result("health" if waited.startswith("not healthy within") else "exited", False, waited)
    status, text = request(base, "/v1/models", key)
    try:
        listed = [m.get("id") for m in json.loads(text).get("data", [])] if status == 200 else []
    except ValueError:
        listed = []
    if model not in listed:
        return Result("models", False, f"/v1/models does not list {model} (HTTP {status})")
    ok, detail = chat(base, key, model, "Reply with one word: ready?", 16)
    say(detail)
    if not ok:
        return Result("generate", False, detail)
    for i in range(warmup):
        words = " ".join(["warm"] * (64 * (i + 1)))
        ok, detail = chat(base, key, model, f"Summarize in one sentence: {words}", 32)
        say(f"warm-up {i + 1}/{warmup}: {detail}")
        if not ok:
            return Result("warmup", False, detail)
    result = Result("generate", True, "generated")
    for result in known_answers(base, key, model, needle_words):
        say(f"check {result.check}: {'ok' if result.ok else 'FAILED'}: {result.detail}")
        if not result.ok:
            return result
    return result


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--env-file")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--needle-words", type=int, default=6000)
    ap.add_argument("--unit", help="the server's systemd unit: a server that dies is said at once, with its error")
    args = ap.parse_args(argv)

    def say(text: str) -> None:
        print(f"service_probe: {text}", flush=True)

    base, key = args.base_url.rstrip("/"), read_key(args.env_file)
    gone = server_gone.watcher(args.unit) if args.unit else None
    result = prove(base, key, args.model, args.timeout, args.warmup, args.needle_words, say, gone)
    if result.ok:
        return 0
    if result.check == "exited":
        say(f"the server is not serving: {result.detail}")
        return 3
    say(f"check {result.check} failed: {result.detail}; see journalctl -u the service")
    return 2 if result.check == "health" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
