"""A failure the server reports, in the server's words: the start check, the watchdog and bench quote it.

The shapes are vLLM 0.27.1's (PyPI wheel `vllm-0.27.1-cp38-abi3-manylinux_2_28_x86_64.whl`):
- once HTTP 200 and the stream have started, a failure is a `data: {"error": {"message", "type", "param",
  "code"}}` event followed by `data: [DONE]` (entrypoints/generate/base/serving.py:153-168
  `create_streaming_error_response`; chat_completion/serving.py:471-476 a reasoning/tool parser that could not
  be made, :835-842 a generation error as `InternalServerError`, any other exception as `BadRequestError` 400);
- before a stream starts, the same ErrorResponse is the body of an HTTP error (chat_completion/api_router.py:63-65).
A real HTTP server on 127.0.0.1 answers with those bytes, so the clients' own stream reading is what is tested.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vllm_rig.host import bench, server_client, service_probe

# What 0.27.1's chat stream sends when generation fails after the first chunk (serving.py:835-836, :842).
ROLE_CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "model": "qwen-local",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
}
GENERATION_ERROR = {
    "error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}
}
BAD_REQUEST = {
    "error": {
        "message": "thinking_token_budget is not yet supported by the V2 model runner",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


class _Handler(BaseHTTPRequestHandler):
    events: list[dict] = []
    status = 200

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.status != 200:
            body = json.dumps(BAD_REQUEST).encode()
            self.send_response(self.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for event in self.events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"events": [ROLE_CHUNK, GENERATION_ERROR], "status": 200})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_start_checks_tool_call_quotes_an_error_inside_the_stream(server: tuple[str, type[_Handler]]) -> None:
    base, _ = server
    result = service_probe.check_tool_call(base, "k", "qwen-local", timeout=10)
    assert not result.ok
    assert "Internal server error (InternalServerError, 500)" in result.detail, result.detail
    assert "no tool_calls" not in result.detail


def test_a_parser_failure_event_is_quoted_too(server: tuple[str, type[_Handler]]) -> None:
    base, handler = server
    handler.events = [BAD_REQUEST]  # serving.py:471-476: the error event first, then [DONE]
    result = service_probe.check_tool_call(base, "k", "qwen-local", timeout=10)
    assert not result.ok and "V2 model runner (BadRequestError, 400)" in result.detail, result.detail


def test_the_watchdogs_question_quotes_the_servers_message_of_an_http_error(
    server: tuple[str, type[_Handler]],
) -> None:
    base, handler = server
    handler.status = 400
    result = service_probe.check_arithmetic(base, "k", "qwen-local", timeout=10)
    assert not result.ok
    assert "HTTP 400: thinking_token_budget is not yet supported" in result.detail, result.detail
    assert '{"error"' not in result.detail  # the message, not the raw JSON


def test_bench_names_the_servers_failure_instead_of_missing_usage(server: tuple[str, type[_Handler]]) -> None:
    base, _ = server
    srv = bench.Server(base, "k", 10)
    with pytest.raises(bench.BenchError) as caught:
        bench.stream_chat(srv, bench.chat_body("qwen-local", "hello", 8, False, stream=True))
    assert "the server failed inside the stream: Internal server error (InternalServerError, 500)" in str(caught.value)
    assert "usage" not in str(caught.value)


def test_the_401_of_the_key_middleware_is_quoted() -> None:
    # serve/utils/server_utils.py:91: {"error": "Unauthorized"}, a string, not an object
    assert server_client.server_error({"error": "Unauthorized"}) == "Unauthorized"
    assert server_client.server_error({"choices": []}) is None
