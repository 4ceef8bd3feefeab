"""The front as this machine's real nginx runs it (skipped without nginx): the rendered box site (for its key map
and client networks) and templates/front/nginx-front.conf.j2 over two boxes, each a TLS server with its own
self-signed certificate (its own CA) that says which key reached it. Clients' requests with the front's key
spread over both, each box gets its own key and never the client's; a stopped box's requests are answered by
the other and it is used again when it is back; a box whose certificate its CA did not sign gets nothing.
"""

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
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from tests.unit.test_lan import _pair
from vllm_rig import paths
from vllm_rig.core.files import rendered
from vllm_rig.host import lan_keys
from vllm_rig.stages.front import deploy as front
from vllm_rig.stages.front.facts import key_line
from vllm_rig.stages.lan import deploy as lan
from vllm_rig.validation import load_settings

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")

CLIENT_KEY = "front-key-for-clients"
BOX_KEYS = {"a": "key-of-box-a", "b": "key-of-box-b"}


class Box(BaseHTTPRequestHandler):
    """A box's proxy: answers with its name and the key it was sent."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        body = json.dumps({"box": self.server.name, "auth": self.headers.get("Authorization")}).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(name: str, port: int, cert: Path, key: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), Box)
    server.name, server.seen = name, []  # type: ignore[attr-defined]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports = {name: _free_port() for name in BOX_KEYS}
        self.certs = {}
        for name in BOX_KEYS:
            (tmp / name).mkdir()
            self.certs[name] = _pair(tmp / name, name="localhost")  # each box its own CA: a self-signed leaf
        self.servers = {name: self.start(name) for name in BOX_KEYS}

    def start(self, name: str) -> ThreadingHTTPServer:
        return _serve(name, self.ports[name], *self.certs[name])

    def stop(self, name: str) -> None:
        self.servers[name].shutdown()
        self.servers[name].server_close()


def _config(tmp: Path, rig: Rig, port: int, trust: dict[str, str]) -> None:
    s = load_settings({**profile_data(), "lan_port": _free_port(), "front_port": port, "front_of": ["b"]})
    lan_site = rendered("/x", lan.TEMPLATE, **lan.site_context(s, ipv6=False)).content.decode()
    boxes = [
        replace(
            front.box(name, s, "127.0.0.1", "localhost"),
            address=f"127.0.0.1:{rig.ports[name]}",
            ca=str(rig.certs[trust[name]][0]),
            key=str(tmp / f"{name}-key.conf"),
            socket=str(tmp / f"{name}.sock"),
        )
        for name in BOX_KEYS
    ]
    for name, key in BOX_KEYS.items():
        (tmp / f"{name}-key.conf").write_text(key_line(key))
    context = {**front.site_context(s, boxes, ipv6=False), "fail_timeout_s": 1}
    front_site = rendered("/x", front.TEMPLATE, **context).content.decode()
    (tmp / "vllm.env").write_text(f"VLLM_API_KEY={CLIENT_KEY}\n")
    made = ["map", "--dir", str(tmp / "keys"), "--env-file", str(tmp / "vllm.env"), "--out", str(tmp / "api-key.conf")]
    assert lan_keys.main(made) == 0
    cert, key = _pair(tmp, name="front")
    for real, here in ((paths.LAN_KEY_MAP, tmp / "api-key.conf"), (paths.LAN_CERT, cert), (paths.LAN_KEY, key)):
        lan_site = lan_site.replace(real, str(here))
        front_site = front_site.replace(real, str(here))
    (tmp / "lan.conf").write_text(lan_site.replace("/var/log/nginx/", f"{tmp}/"))
    (tmp / "front.conf").write_text(front_site.replace("/var/log/nginx/", f"{tmp}/"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    (tmp / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 2;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\n"
        f"events {{}}\nhttp {{\n  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n"
        f"  access_log {tmp}/access.log;\n  include {tmp}/lan.conf;\n  include {tmp}/front.conf;\n}}\n"
    )


@pytest.fixture
def make_front(tmp_path: Path) -> Iterator:
    started: list[tuple[subprocess.Popen, Rig]] = []

    def make(trust: dict[str, str] | None = None) -> tuple[int, Rig]:
        rig = Rig(tmp_path)
        port = _free_port()
        _config(tmp_path, rig, port, trust or {name: name for name in BOX_KEYS})
        conf = ["-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")]
        check = subprocess.run(["nginx", "-t", *conf], capture_output=True)
        assert check.returncode == 0, check.stderr.decode()
        server = subprocess.Popen(["nginx", *conf])
        started.append((server, rig))
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and server.poll() is None, "nginx did not start"
            time.sleep(0.05)
        return port, rig

    yield make
    for server, rig in started:
        server.terminate()
        server.wait(timeout=10)
        for name in BOX_KEYS:
            rig.stop(name)


def ask(port: int, key: str | None = CLIENT_KEY, path: str = "/v1/chat/completions") -> tuple[int, dict]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=20, context=ssl._create_unverified_context())
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        conn.request("POST", path, body=b'{"model": "m", "messages": []}', headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_requests_spread_over_both_boxes_each_with_its_own_key(make_front) -> None:
    port, rig = make_front()
    answers = [ask(port) for _ in range(8)]
    assert {status for status, _ in answers} == {200}
    assert {body["box"] for _, body in answers} == {"a", "b"}
    for _, body in answers:
        assert body["auth"] == f"Bearer {BOX_KEYS[body['box']]}"  # its own key, never the client's
    assert ask(port, key=None)[0] == 401
    assert ask(port, key="wrong")[0] == 401
    assert ask(port, key=BOX_KEYS["a"])[0] == 401  # a box's key is not a key of the front
    assert ask(port, path="/metrics")[0] == 404


def test_a_stopped_box_is_left_out_and_used_again_when_it_is_back(make_front) -> None:
    port, rig = make_front()
    rig.stop("b")
    answers = [ask(port) for _ in range(6)]
    assert [(status, body.get("box")) for status, body in answers] == [(200, "a")] * 6  # POSTs, none lost
    rig.servers["b"] = rig.start("b")
    # fail_timeout is 1 s here, on nginx's clock of whole seconds (ngx_time()) and "more than" it: b is tried
    # again within 1-3 s of its last failure. Ask until it answers, for longer than that.
    seen: set[str] = set()
    deadline = time.monotonic() + 6
    while "b" not in seen and time.monotonic() < deadline:
        seen |= {ask(port)[1]["box"] for _ in range(2)}
        time.sleep(0.25)
    assert "b" in seen


def test_a_box_whose_certificate_its_ca_did_not_sign_gets_nothing(make_front) -> None:
    port, rig = make_front(trust={"a": "a", "b": "a"})  # b's certificate checked against a's CA: refused
    answers = [ask(port) for _ in range(6)]
    assert [(status, body.get("box")) for status, body in answers] == [(200, "a")] * 6
    assert rig.servers["b"].seen == []  # type: ignore[attr-defined]  # b's key never sent to it
