"""The one client of the server on the box (vllm_rig/host/server_client.py): the key every program reads the same way,
the key sent as a Bearer header and never printed, the status probe's one request, and the two tiers (the programs
the host's python3 runs import it without prometheus_client; bench's /metrics needs the tools venv's)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.host import server_client, status_probe
from vllm_rig.stages import locks
from vllm_rig.stages.model.start import PROMETHEUS_CLIENT_VERSION
from vllm_rig.validation import load_settings

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-rig-0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f"HF_HOME=/x\nVLLM_API_KEY={KEY}\n", KEY),  # the service's env file
        (f'VLLM_API_KEY="{KEY}"\n', KEY),
        (f"{KEY}\n", KEY),  # a file holding the bare key (bench --api-key-file)
        ("HF_HOME=/x\n", "from-env"),  # an env file without the key: the environment's
    ],
    ids=["env-file", "quoted", "bare", "no-key-line"],
)
def test_every_program_reads_the_key_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    (tmp_path / "vllm.env").write_text(text)
    assert server_client.read_key(str(tmp_path / "vllm.env")) == key


def test_an_unreadable_key_file_is_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert server_client.read_key(str(tmp_path / "absent.env")) is None
    assert server_client.read_key(None) is None


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "authorization": self.headers.get("authorization")}).encode()
        self.send_response(200 if self.path.endswith("/v1/models") else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_status_probe_sends_the_key_as_bearer_and_never_prints_it(echo: str, tmp_path: Path) -> None:
    (tmp_path / "vllm.env").write_text(f"VLLM_API_KEY={KEY}\n")
    got = status_probe.fetch(f"{echo}/v1/models", str(tmp_path / "vllm.env"), 5)
    assert got["status"] == 200 and got["key_sent"] is True
    assert json.loads(got["body"]) == {"path": "/v1/models", "authorization": f"Bearer {KEY}"}
    metrics = status_probe.fetch(f"{echo}/metrics", None, 5)  # no key file: no header
    assert metrics["status"] == 404 and json.loads(metrics["body"])["authorization"] is None
    assert metrics["key_sent"] is False


def test_an_unreachable_server_is_status_zero_with_the_reason(echo: str) -> None:
    port = int(echo.rsplit(":", 1)[1])
    status, why = server_client.request("http://127.0.0.1:9", "/health", None, timeout=2)
    assert status == 0 and "refused" in why.lower()
    assert status_probe.fetch("http://127.0.0.1:9/metrics", None, 2)["error"]
    assert server_client.request(f"http://127.0.0.1:{port}/base/", "/v1/models", KEY)[0] == 200  # a base path kept


def test_metrics_are_read_by_prometheus_clients_parser() -> None:
    text = (
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{engine="0"} 3.0\nvllm:prefix_cache_hits_total{engine="1"} 4.0\n'
    )
    assert server_client.metric_values(text) == {"vllm:prefix_cache_hits_total": [3.0, 4.0]}
    with pytest.raises(ValueError):
        server_client.metric_values("vllm:kv_cache_usage_perc{engine= 0.5\n")


def test_the_host_python_tier_imports_the_client_without_prometheus_client() -> None:
    """The start check, the watchdog, the deploy's proof and the status probe run with the host's python3, which
    has no prometheus_client; only reading /metrics asks for it."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from vllm_rig.host import start_check, watchdog, service_probe, status_probe, server_client\n"
        "try:\n    server_client.metric_values('')\nexcept ImportError:\n    print('metrics need the tools venv')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "metrics need the tools venv"


def test_the_tools_lock_holds_prometheus_client_at_its_pin() -> None:
    lock = locks.tools_lock(load_settings(profile_data()))
    assert locks.entries(lock.text)["prometheus-client"] == PROMETHEUS_CLIENT_VERSION
    assert locks.unhashed(lock.text) == []
    pinned = (REPO / "requirements.txt").read_text()
    assert f"prometheus_client=={PROMETHEUS_CLIENT_VERSION}\n" in pinned  # the control machine reads the same
