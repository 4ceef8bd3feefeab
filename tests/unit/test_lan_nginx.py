"""The LAN site as this machine's real nginx runs it (skipped without nginx): the rendered
templates/lan/nginx-site.conf.j2 and the key map key_map_script makes, in front of an upstream that answers
with the raw path it was sent. Every spelling that nginx normalises to one path while the server routes
another is refused (400) or stopped at /metrics (403); /health and keyed /v1 reach the server as they were
asked; a hand-set key with regex characters in it works literally.

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
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.lan_bypass import BYPASS
from tests.unit.groupdata import profile_data
from tests.unit.test_lan import _pair
from vllm_rig import paths
from vllm_rig.core.files import rendered
from vllm_rig.stages.lan.deploy import TEMPLATE, site_context
from vllm_rig.stages.lan.facts import key_map_script
from vllm_rig.validation import load_settings

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

KEY = 'a|b.*$c"d\\e'  # set by hand: regex metacharacters, a quote and a backslash


class Echo(BaseHTTPRequestHandler):
    """The upstream: says which raw path reached it."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"path": self.path}).encode()
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
        ("/var/log/nginx/", f"{tmp}/"),
    ):
        site = site.replace(real, str(here))
    metrics_geo = site.index("geo $vllm_rig_metrics_ok")
    head, tail = site[:metrics_geo], site[metrics_geo:]
    return head + tail.replace("    127.0.0.0/8 1;\n", "", 1)  # loopback stands for a LAN client here


@pytest.fixture(scope="module", params=[False, True], ids=["health_keyed", "health_open"])
def proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bool]]:
    tmp = tmp_path_factory.mktemp("nginx")
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    _pair(tmp)
    (tmp / "vllm.env").write_text(f"VLLM_API_KEY={KEY}\n")
    made = subprocess.run(["sh", "-c", key_map_script(str(tmp / "vllm.env"))], capture_output=True, check=True)
    (tmp / "api-key.conf").write_bytes(made.stdout)
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
        yield port, request.param
    finally:
        server.terminate()
        server.wait(timeout=10)
        upstream.shutdown()


def get(port: int, path: str, auth: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
    try:
        conn.request("GET", path, headers={"Authorization": auth} if auth else {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_every_bypass_spelling_is_refused_with_or_without_the_key(proxy: tuple[int, bool]) -> None:
    port, _ = proxy
    let_through = {}
    for path in BYPASS:
        for auth in (None, f"Bearer {KEY}"):
            status, body = get(port, path, auth)
            if status not in (400, 403):
                let_through[(path, auth is not None)] = (status, body)
    assert let_through == {}


def test_health_and_keyed_v1_reach_the_server_as_asked(proxy: tuple[int, bool]) -> None:
    port, health_open = proxy
    assert get(port, "/v1/models", f"Bearer {KEY}") == (200, '{"path": "/v1/models"}')
    assert get(port, "/v1/models?q=a/../b", f"bearer {KEY}") == (200, '{"path": "/v1/models?q=a/../b"}')
    assert get(port, "/health", f"Bearer {KEY}") == (200, '{"path": "/health"}')
    assert get(port, "/health")[0] == (200 if health_open else 401)


def test_a_hand_set_key_with_regex_characters_is_compared_literally(proxy: tuple[int, bool]) -> None:
    port, _ = proxy
    for wrong in ("a", "b", "bc", "a|b", "zzz", KEY.upper(), KEY + "x", "x" + KEY, KEY[:-1]):
        assert get(port, "/v1/models", f"Bearer {wrong}")[0] == 401, wrong
    assert get(port, "/v1/models", f"Basic {KEY}")[0] == 401
    assert get(port, "/v1/models", f"BEARER {KEY}")[0] == 200  # vLLM's scheme check is case-blind too
