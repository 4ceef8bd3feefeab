#!/usr/bin/env python3
"""Is the vLLM service really serving? Run on the host after a (re)start.

    service_probe.py --base-url http://127.0.0.1:8000 --model qwen-local --env-file /etc/vllm-rig/vllm.env
                     [--timeout 900] [--warmup 2]

1. waits for /health (the first start compiles for minutes), printing progress;
2. /v1/models must list the served model (a listed model is not proof of generation, so:)
3. one real chat completion with the API key must return generated text;
4. warm-up requests, so the first user's request does not pay for JIT compilation.
Exit 0 serving, 1 answering wrongly (HTTP error, empty generation, model missing), 2 not up in time.
The key is read from the env file (VLLM_API_KEY=...), never from the command line, and never printed.
Standard library only: it runs with the host's python3.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def read_key(env_file: str | None) -> str | None:
    if not env_file:
        return None
    with open(env_file) as f:
        for line in f:
            name, sep, value = line.strip().partition("=")
            if sep and name == "VLLM_API_KEY":
                return value.strip().strip('"') or None
    return None


def request(base: str, path: str, key: str | None, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


def wait_healthy(base: str, timeout: float, say) -> bool:
    start = time.monotonic()
    last_note = 0.0
    while time.monotonic() - start < timeout:
        status, _ = request(base, "/health", None, timeout=5)
        if status == 200:
            say(f"healthy after {time.monotonic() - start:.0f}s")
            return True
        if time.monotonic() - last_note >= 15:
            say(f"waiting for {base}/health ({time.monotonic() - start:.0f}s of {timeout:.0f}s)")
            last_note = time.monotonic()
        time.sleep(2)
    return False


def chat(base: str, key: str | None, model: str, prompt: str, max_tokens: int) -> tuple[bool, str]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    status, text = request(base, "/v1/chat/completions", key, body, timeout=600)
    if status != 200:
        hint = " (the API key was refused)" if status == 401 else ""
        return False, f"chat completion answered HTTP {status}{hint}: {text[:200]}"
    message = json.loads(text)["choices"][0]["message"]
    generated = (message.get("content") or "") + (message.get("reasoning_content") or "")
    if not generated.strip():
        return False, "chat completion returned no text"
    usage = json.loads(text).get("usage", {})
    return True, f"generated {usage.get('completion_tokens', '?')} tokens"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--env-file")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)

    def say(text: str) -> None:
        print(f"service_probe: {text}", flush=True)

    base, key = args.base_url.rstrip("/"), read_key(args.env_file)
    if not wait_healthy(base, args.timeout, say):
        say(f"not healthy within {args.timeout:.0f}s; see journalctl -u the service")
        return 2
    status, text = request(base, "/v1/models", key)
    if status != 200 or args.model not in [m.get("id") for m in json.loads(text).get("data", [])]:
        say(f"/v1/models does not list {args.model} (HTTP {status})")
        return 1
    ok, detail = chat(base, key, args.model, "Reply with one word: ready?", 16)
    say(detail)
    if not ok:
        return 1
    for i in range(args.warmup):
        words = " ".join(["warm"] * (64 * (i + 1)))
        ok, detail = chat(base, key, args.model, f"Summarize in one sentence: {words}", 32)
        say(f"warm-up {i + 1}/{args.warmup}: {detail}")
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
