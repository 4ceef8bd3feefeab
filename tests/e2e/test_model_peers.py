"""Model peers on the sandbox: two new machines (after the host stage) in one pyinfra run of the model stage;
rig1 (first in inventory order) fetches from the HF mirror stand-in and serves rig2, which waits for it and fetches
every file from it, each checked against rig2's own plan from the mirror. Then the whole deploy.py with rig2's
model gone and rig1's server unable to start (its port taken): one line, the mirror instead, verified, and rig2's
service proven. The machines share the host's addresses, so each serves on its own model_peer_port
(inventory/sandbox.py).
Last, where both rigs serve one model: one URL for both (front_of on rig1), requests spread over both, rig2's
server stopped and back, and the front turned off again.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import deploy, staged
from tests.e2e.model import (
    MODEL_DIR,
    MODELS,
    REPO,
    STAGE,
    STATUS,
    UNIT,
    clear_log,
    digests,
    every_content,
    fetched_contents,
    knobs,
)
from tests.sandbox import machine, paths
from tests.sandbox.__main__ import up

pytestmark = pytest.mark.sandbox

SAME_MODEL: dict[str, object] = {
    "model_repo": REPO,
    "model_dir": MODEL_DIR,
}  # rig2 is of the qwen38 profile: give it rig1's model
MARKER = f"{MODEL_DIR}/.vllm-rig-complete.json"


def sh(rig: Rig, name: str, command: str) -> str:
    return rig.ssh(name, f"sudo sh -c {json.dumps(command)}")


def marker(rig: Rig, name: str) -> dict[str, object]:
    return json.loads(sh(rig, name, f"cat {MARKER}"))


def host_digests(rig: Rig, name: str) -> dict[str, str]:
    out = sh(rig, name, f"cd {MODEL_DIR}/ && find -L . -type f ! -name .vllm-rig-complete.json -exec sha256sum {{}} +")
    return {line.split()[1].removeprefix("./"): line.split()[0] for line in out.splitlines() if line.strip()}


def hang_up(listener: socket.socket) -> None:
    """Accept and close at once: what rig2 meets at rig1's address is no model peer."""
    with contextlib.suppress(OSError):
        while True:
            listener.accept()[0].close()


def peer_lines(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if "model peer" in line and "not used" in line]


@pytest.fixture(scope="module")
def two(rig: Rig) -> Iterator[Rig]:
    """rig1 and rig2 new machines given the host stage (deploys.staged): this module brings rig2 up itself (so it
    runs in the test command) and takes it down at the end, so the modules after it see one machine again, as the
    `rig` fixture gives it."""
    up(2)
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    try:
        staged(both, "rig1", "rig2")  # new machines after the host stage: the model stage and what follows it
        knobs()
        yield both
    finally:
        knobs()
        machine.down(machine.Machine("rig2"))


def test_one_run_over_two_fresh_hosts_the_second_fetches_from_the_first(two: Rig) -> None:
    rig = two
    clear_log()
    run = deploy(rig, *STAGE, data=SAME_MODEL)
    assert run.ok, run.log[-4000:]
    assert f"Model (start) | Serve {REPO}@main to rig2" in run.changed
    assert fetched_contents() == every_content()  # each file from the mirror once: rig1's download
    assert marker(rig, "rig1")["from_peer"] is None
    assert marker(rig, "rig2")["from_peer"] == {"name": "rig1", "files": len(digests())}
    assert host_digests(rig, "rig2") == digests()
    assert f"[rig2] model: {REPO}@main: complete" in run.log and f"{len(digests())} from model peer rig1" in run.log
    assert not peer_lines(run.log)
    # rig2 asked while rig1 still downloaded: rig1's server said "not yet" at least once
    served = sh(rig, "rig1", "journalctl --no-pager -t vllm-rig-model-serve")
    assert '"GET /v1/status HTTP/1.1" 503' in served
    # rig2 said it was done with rig1 once it had the files: the server stopped by itself, before model finish
    assert "rig2 is done with this peer; waiting for nobody" in served
    assert "model_serve: stopped: every follower (rig2) reported done" in served
    # The run's peering is over: no server, no token left on either host; a second run changes nothing.
    for name in ("rig1", "rig2"):
        assert sh(rig, name, "systemctl is-active vllm-rig-model-serve || true").strip() in ("inactive", "")
        assert sh(rig, name, "ls /etc/vllm-rig/model-peer.env 2>/dev/null || true").strip() == ""
    again = deploy(rig, *STAGE, data=SAME_MODEL)
    assert again.ok and again.changed == [], again.changed


def test_an_unreachable_model_peer_falls_back_with_one_line_and_still_ends_proven(two: Rig) -> None:
    """The whole deploy.py over both: rig1 changes nothing but is asked to serve; rig2 goes from the model stage
    to a proven service, its model from the mirror after one line."""
    rig = two
    sh(rig, "rig2", f"systemctl stop {UNIT} 2>/dev/null; rm -rf {MODELS} {STATUS}; true")
    clear_log()
    port = paths.MODEL_PEER_PORT_BASE + 1  # rig1's
    with socket.socket() as taken:  # something else holds rig1's port: its server cannot start
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last run's connections in TIME_WAIT
        taken.bind(("127.0.0.1", port))
        taken.listen()
        threading.Thread(target=hang_up, args=(taken,), daemon=True).start()
        run = deploy(rig, "deploy.py", data=SAME_MODEL, timeout=1200)
    assert run.ok, run.error_line()
    [line] = peer_lines(run.log)
    assert line.startswith(f"[rig2] model: model peer rig1 not used: not reachable at http://127.0.0.1:{port} (")
    assert line.endswith(f"fetching from http://127.0.0.1:{paths.HF_MIRROR_PORT} instead")
    assert fetched_contents() == every_content()  # rig2's files, from the mirror
    assert marker(rig, "rig2")["from_peer"] is None
    assert host_digests(rig, "rig2") == digests()
    assert "cannot listen" in sh(rig, "rig1", "journalctl --no-pager -t vllm-rig-model-serve")
    assert service.models(service.api_key(rig, "rig2"), "rig2") == ["qwen38-27b"]  # proven by the deploy, answering


FRONT = {**SAME_MODEL, "served_model_name": "qwen-local"}  # rig2's profile names its model otherwise
BOX_LOG = "/var/log/nginx/vllm-rig-lan.access.log"


def box_requests(rig: Rig, name: str, status: int = 200) -> int:
    """Chat completions in the box's own proxy log that it answered with `status`."""
    out = sh(rig, name, f"grep -c 'POST /v1/chat/completions HTTP/1.1\" {status} ' {BOX_LOG} || true")
    return int(out.strip() or 0)


def ask_front(key: str) -> int:
    """One chat completion through the front (rig1's front_port), trusting rig1's CA; its status."""
    context = ssl.create_default_context(cafile=str(paths.REPO / "lan-ca" / "rig1-ca.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", paths.FRONT_PORT_BASE + 1, timeout=60, context=context)
    body = {"model": "qwen-local", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_one_url_for_both_rigs_spreads_fails_over_and_comes_back(two: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = two
    monkeypatch.setenv("VLLM_RIG_SANDBOX_HOST_DATA", json.dumps({"rig1": {"front_of": ["rig2"]}}))
    refused = deploy(rig, "tasks/front.py", data=SAME_MODEL)  # rig2 serves its model as qwen38-27b
    assert not refused.ok and refused.changed == []
    [line] = {line.strip() for line in refused.log.splitlines() if "settings: " in line}  # said again at the end
    assert line.startswith("[rig1] settings: front_of: rig2 serves ") and "must serve the same model" in line, line
    run = deploy(rig, "tasks/service.py", "tasks/front.py", data=FRONT)
    assert run.ok, run.error_line()
    key, key2 = service.api_key(rig, "rig1"), service.api_key(rig, "rig2")
    assert key2 not in run.log and sh(rig, "rig1", "stat -c '%a %U' /etc/vllm-rig/front/rig2-key.conf") == "600 root\n"
    before = {name: box_requests(rig, name) for name in ("rig1", "rig2")}
    assert [ask_front(key) for _ in range(6)] == [200] * 6
    after = {name: box_requests(rig, name) for name in ("rig1", "rig2")}
    assert all(after[name] > before[name] for name in after), (before, after)  # spread over both
    assert ask_front(key2) == 401  # a box's key is not the front's

    sh(rig, "rig2", "systemctl stop vllm.service")
    stopped = box_requests(rig, "rig1")
    assert [ask_front(key) for _ in range(6)] == [200] * 6  # every one answered, by rig1
    assert box_requests(rig, "rig1") == stopped + 6
    assert box_requests(rig, "rig2", status=502) >= 1  # rig2's proxy saw its server gone

    sh(rig, "rig2", "systemctl start vllm.service")
    deadline = time.monotonic() + 180
    while not _answers(key2) and time.monotonic() < deadline:
        time.sleep(2)
    back = box_requests(rig, "rig2")
    time.sleep(11)  # the front leaves a failed box out for fail_timeout (10 s), then tries it again
    assert [ask_front(key) for _ in range(6)] == [200] * 6
    assert box_requests(rig, "rig2") > back  # used again

    again = deploy(rig, "tasks/service.py", "tasks/front.py", data=FRONT)
    assert again.ok and again.changed == [], again.changed
    monkeypatch.delenv("VLLM_RIG_SANDBOX_HOST_DATA")
    off = deploy(rig, "tasks/front.py", data=FRONT)  # front_of empty: no front left on rig1
    assert off.ok, off.error_line()
    assert sh(rig, "rig1", "ls /etc/nginx/conf.d/ /etc/vllm-rig/").split().count("vllm-rig-front.conf") == 0
    assert "front" not in sh(rig, "rig1", "ls /etc/vllm-rig/").split()


def _answers(key: str) -> bool:
    try:
        return service.models(key, "rig2", timeout=5) == ["qwen-local"]
    except OSError:
        return False
