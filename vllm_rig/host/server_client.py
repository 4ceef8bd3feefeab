"""The one client of the vLLM server on the box: the start check, the watchdog, bench and the status probe ask
through it. The API key's reader, one request over http.client (HTTPS where the URL says so), the chat stream's
reader (server-sent `data:` lines up to `[DONE]`), the server's error object in its own words, and /metrics.

Standard library except `metric_values`: the start check, the watchdog and the status probe import this module
with the host's python3 (the status probe before anything is installed) and never read /metrics; bench, which does,
runs with the tools venv's python, where prometheus_client is installed from the tools lock.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

# The server's key: VLLM_API_KEY= in the service's env file (systemd's EnvironmentFile=).
KEY_NAME = "VLLM_API_KEY"
# Where a chat message (or a stream's delta) carries generated text: upstream vLLM 0.21.0 names the thinking part
# "reasoning", the fork's line "reasoning_content" (restored in its v0.1.10); a short thinking answer is in either.
TEXT_KEYS = ("content", "reasoning_content", "reasoning")


def read_key(path: str | None) -> str | None:
    """The API key: VLLM_API_KEY= in `path` (the service's env file) or the bare key that file holds, else the
    environment's VLLM_API_KEY. A file that cannot be read holds no key (the server's 401 then says so)."""
    if path:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            text = ""
        for line in text.splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() == KEY_NAME:
                return value.strip().strip('"') or None
        if text and "=" not in text:
            return text
    return os.environ.get(KEY_NAME) or None


@contextlib.contextmanager
def open_request(
    base: str, method: str, path: str, key: str | None, body: dict | None = None, timeout: float = 60
) -> Iterator[http.client.HTTPResponse]:
    """The response to one request, whatever its status; OSError or HTTPException when the server cannot be
    reached. http.client, not urllib: no proxy from the environment comes between the box and its own server."""
    url = urlsplit(base)
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = kind(url.hostname or "127.0.0.1", url.port, timeout=timeout)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    try:
        conn.request(method, url.path.rstrip("/") + path, json.dumps(body) if body is not None else None, headers)
        yield conn.getresponse()
    finally:
        conn.close()


def request(base: str, path: str, key: str | None, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    """(HTTP status, body) of a GET, or of a POST of `body`; (0, why) when the server cannot be reached."""
    try:
        with open_request(base, "POST" if body is not None else "GET", path, key, body, timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as err:
        return 0, str(err) or type(err).__name__


def sse_events(resp: http.client.HTTPResponse) -> Iterator[tuple[float, dict]]:
    """(arrival time, parsed chunk) per server-sent `data:` event of a chat stream, until `[DONE]`."""
    while line := resp.readline():
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield time.perf_counter(), json.loads(data)


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def server_error(payload: object) -> str | None:
    """The server's own words in an error object, else None.

    vLLM sends `{"error": {"message", "type", "param", "code"}}` (ErrorResponse, vLLM 0.27.1
    entrypoints/openai/engine/protocol.py:63-71): as the body of an HTTP error before a stream starts, and as a
    `data:` event at HTTP 200 once it has, then `data: [DONE]` (entrypoints/generate/base/serving.py:153-168;
    chat_completion/serving.py:471-476 a parser that could not be made, :835-840 a generation error or any other
    exception). The key middleware's 401 is `{"error": "Unauthorized"}` (serve/utils/server_utils.py:91)."""
    if not isinstance(payload, dict) or "error" not in payload:
        return None
    error = payload["error"]
    if not isinstance(error, dict):
        return str(error)
    message = str(error.get("message") or "(no message)")
    kind = ", ".join(str(error[k]) for k in ("type", "code") if error.get(k) not in (None, ""))
    return f"{message} ({kind})" if kind else message


def error_text(text: str, limit: int = 120) -> str:
    """An HTTP error body as one line: the server's message when the body is vLLM's error object."""
    try:
        said = server_error(json.loads(text))
    except ValueError:
        said = None
    return one_line(said if said is not None else text, limit)


def metric_values(text: str) -> dict[str, list[float]]:
    """Every sample's value per sample name (one per label set: engines, positions) of Prometheus text, read by
    prometheus_client's own parser (ValueError: not Prometheus text). Imported here, not at the top: the
    stdlib-tier programs that import this module never read /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, []).append(float(sample.value))
    return values
