"""The LAN site as this machine's real nginx runs it (skipped without nginx): the rendered
templates/lan/nginx-site.conf.j2 and the key map the host program lan_keys makes (the server's key and two
client keys), in front of an upstream that answers with the raw path it was sent and records the Authorization
header. Every spelling that nginx normalises to one path while the server routes
another is refused (400) or stopped at /metrics (403); /health and keyed /v1 reach the server as they were
asked; a hand-set key with regex characters in it works literally; each client key reaches the server as the
server's own key, and the access log names the key, never holds it.

Loopback is in the metrics allowlist of the real site; here the client is loopback, so the test drops
loopback from that one list to stand for a LAN client in lan_allow but not in lan_metrics_allow
(tests/e2e/test_lan_stage.py sends the same requests from a real LAN namespace in the sandbox)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.lan_bypass import BYPASS
from tests.unit.groupdata import profile_data
from tests.unit.test_lan import _pair
from vllm_rig import paths
from vllm_rig.core.files import rendered
from vllm_rig.host import lan_keys
from vllm_rig.stages.lan.deploy import TEMPLATE, site_context
from vllm_rig.validation import load_settings

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

KEY = 'a|b.*$c"d\\e'  # set by hand: regex metacharacters, a quote and a backslash
CLIENTS = {"laptop": "laptopKey-" + "L4" * 16, "chat-page": "chatKey_" + "C7" * 16}


class Echo(BaseHTTPRequestHandler):
    """The upstream: says which raw path reached it."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"path": self.path}).encode()
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site(tmp: Path, upstream: int, port: int, health_open: bool) -> str:
    data = {**profile_data(), "vllm_port": upstream, "lan_port": port, "lan_health_open": health_open}
    site = rendered("/x", TEMPLATE, **site_context(load_settings(data), ipv6=False)).content.decode()
    for real, here in (
        (paths.LAN_KEY_MAP, tmp / "api-key.conf"),
        (paths.LAN_CERT, tmp / "box.crt"),
        (paths.LAN_KEY, tmp / "box.key"),
        (paths.LAN_ACCESS_LOG, str(tmp / "access.log")),
        ("/var/log/nginx/", f"{tmp}/"),
    ):
        site = site.replace(real, str(here))
    metrics_geo = site.index("geo $vllm_rig_metrics_ok")
    head, tail = site[:metrics_geo], site[metrics_geo:]
    return head + tail.replace("    127.0.0.0/8 1;\n", "", 1)  # loopback stands for a LAN client here


@pytest.fixture(scope="module", params=[False, True], ids=["health_keyed", "health_open"])
def proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("nginx")
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    upstream.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    _pair(tmp)
    (tmp / "vllm.env").write_text(f"VLLM_API_KEY={KEY}\n")
    (tmp / "api-key.conf").write_text(lan_keys.render_map(KEY, CLIENTS))
    port = _free_port()
    (tmp / "site.conf").write_text(_site(tmp, upstream.server_address[1], port, request.param))
    user = "user root;\n" if os.geteuid() == 0 else ""
    (tmp / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\n"
        f"events {{}}\nhttp {{\n  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n"
        f"  include {tmp}/site.conf;\n}}\n"
    )
    check = subprocess.run(["nginx", "-t", "-p", str(tmp), "-c", str(tmp / "nginx.conf")], capture_output=True)
    assert check.returncode == 0, check.stderr.decode()
    server = subprocess.Popen(["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")])
    try:
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and server.poll() is None, "nginx did not start"
            time.sleep(0.05)
        yield Proxy(port, request.param, upstream.seen, tmp / "access.log")  # type: ignore[attr-defined]
    finally:
        server.terminate()
        server.wait(timeout=10)
        upstream.shutdown()


@dataclass
class Proxy:
    port: int
    health_open: bool
    seen: list[str | None]  # the Authorization header of each request the upstream got
    log: Path


def get(port: int, path: str, auth: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
    try:
        conn.request("GET", path, headers={"Authorization": auth} if auth else {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_every_bypass_spelling_is_refused_with_or_without_the_key(proxy: Proxy) -> None:
    port = proxy.port
    let_through = {}
    for path in BYPASS:
        for auth in (None, f"Bearer {KEY}"):
            status, body = get(port, path, auth)
            if status not in (400, 403):
                let_through[(path, auth is not None)] = (status, body)
    assert let_through == {}


def test_health_and_keyed_v1_reach_the_server_as_asked(proxy: Proxy) -> None:
    port, health_open = proxy.port, proxy.health_open
    assert get(port, "/v1/models", f"Bearer {KEY}") == (200, '{"path": "/v1/models"}')
    assert get(port, "/v1/models?q=a/../b", f"bearer {KEY}") == (200, '{"path": "/v1/models?q=a/../b"}')
    assert get(port, "/health", f"Bearer {KEY}") == (200, '{"path": "/health"}')
    assert get(port, "/health")[0] == (200 if health_open else 401)


def test_a_hand_set_key_with_regex_characters_is_compared_literally(proxy: Proxy) -> None:
    port = proxy.port
    for wrong in ("a", "b", "bc", "a|b", "zzz", KEY.upper(), KEY + "x", "x" + KEY, KEY[:-1]):
        assert get(port, "/v1/models", f"Bearer {wrong}")[0] == 401, wrong
    assert get(port, "/v1/models", f"Basic {KEY}")[0] == 401
    assert get(port, "/v1/models", f"BEARER {KEY}")[0] == 200  # vLLM's scheme check is case-blind too


def test_each_client_key_gets_in_and_the_server_is_sent_its_own_key(proxy: Proxy) -> None:
    """nginx swaps the client's Authorization for the server's key (vLLM checks only that one), whichever key
    let the request in; a client key is compared as literally as the server's."""
    for name, key in CLIENTS.items():
        del proxy.seen[:]
        assert get(proxy.port, "/v1/models", f"Bearer {key}") == (200, '{"path": "/v1/models"}'), name
        assert proxy.seen == [f"Bearer {KEY}"], name  # the hand-set key, $ and quote and backslash as they are
        for wrong in (key[:-1], key + "x", key.upper(), name):
            assert get(proxy.port, "/v1/models", f"Bearer {wrong}")[0] == 401, wrong


def test_the_access_log_names_each_key_and_never_holds_one(proxy: Proxy) -> None:
    # Each request carries a mark of its own: nginx writes a line after the answer has gone, so a line of an
    # earlier test may land between these (counting lines from "before" raced under load).
    mark = uuid.uuid4().hex
    sent = {"laptop": f"Bearer {CLIENTS['laptop']}", "chat-page": f"Bearer {CLIENTS['chat-page']}"}
    sent |= {"server": f"Bearer {KEY}", "-": "Bearer wrong-key"}
    for name, header in sent.items():
        get(proxy.port, f"/v1/models?mark={mark}-{name}", header)
    deadline = time.monotonic() + 10
    while proxy.log.read_text().count(mark) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.05)
    text = proxy.log.read_text()
    for name in sent:
        line = next(line for line in text.splitlines() if f"mark={mark}-{name} " in line)
        assert line.split()[1] == f"key={name}", line
    for key in (*CLIENTS.values(), KEY, "wrong-key"):
        assert key not in text
    # The host program's own count reads these lines.
    counts = lan_keys.requests_since([str(proxy.log)], 0)
    assert counts["laptop"] >= 1 and counts["chat-page"] >= 1 and counts["server"] >= 1 and counts["-"] >= 1
