"""LAN stage on the sandbox, seen from the LAN side: a network namespace joined to the host by a veth pair is
the client machine (the sandbox machines share the host's network namespace, so the veth's host end is an
address of rig1 as a LAN client reaches it). Real nginx from Debian's archive, real TLS, the stand-in server.

The namespace has two addresses: .2 is an allowed client (lan_allow), .3 is also allowed to read /metrics
(lan_metrics_allow); the host's own non-loopback address 192.0.2.2 is a network that is not allowed."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import DeployRun, deploy, forget_lan_ca, serving_rig
from tests.lan_bypass import BYPASS
from tests.sandbox import machine, paths
from tests.sandbox.fixtures import forge
from vllm_rig import paths as rig_paths
from vllm_rig.stages.remove.deploy import DRIVER_FILES

pytestmark = pytest.mark.sandbox

NS = f"vrl{paths.SLOT}"
NET = f"198.18.{paths.SLOT}"  # RFC 2544 benchmarking range: routed nowhere
BOX, CLIENT, METRICS_CLIENT = f"{NET}.1", f"{NET}.2", f"{NET}.3"
OUTSIDE = "192.0.2.2"  # the host's eth0: a non-loopback address of the box, on a network lan_allow leaves out
LAN_PORT = paths.LAN_PORT_BASE + 1
SERVER_PORT = paths.VLLM_PORT_BASE + 1
CA = paths.REPO / "lan-ca" / "rig1-ca.crt"
# Secrets planted in every deploy of this module (issue 23): each must be absent from `ps`, the journal, the
# units and pyinfra's -vv output, and present only where it must be. The mirror ignores the HF token; the
# store and MOK passwords are control-side only (runtime_artifacts is off, enrollment is not deploy_stages).
PLANTED = {
    "hf_token": "hf_PlantedToken" + "T7" * 12,
    "runtime_artifact_store_auth": "rig:planted-store-password-" + "S3" * 8,
    "secure_boot_mok_password": "planted-mok-" + "M5" * 6,
}
DATA = {"lan_allow": [f"{NET}.0/24"], "lan_metrics_allow": [f"{METRICS_CLIENT}/32"], **PLANTED}
FRESH: dict[str, DeployRun] = {}  # the module's first deploy, run with -vv, for the secrets check
DEFAULT_MODEL_DIR = "/opt/vllm-rig/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8"
PATHS = ("/health", "/metrics", "/version", "/ping", "/load", "/v1/models", "/no/such/path")


@pytest.fixture(scope="module")
def lan() -> Iterator[str]:
    """The client namespace (made before the deploy, so the certificate names the veth's host end)."""
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2 (ip netns) on this machine")
    host_end = f"{NS}h"
    _ip("netns", "del", NS, check=False)
    _ip("link", "del", host_end, check=False)
    _ip("netns", "add", NS)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", NS)
    _ip("addr", "add", f"{BOX}/24", "dev", host_end)
    _ip("link", "set", host_end, "up")
    for address in (CLIENT, METRICS_CLIENT):
        _ip("-n", NS, "addr", "add", f"{address}/24", "dev", "eth0")
    _ip("-n", NS, "link", "set", "eth0", "up")
    _ip("-n", NS, "link", "set", "lo", "up")
    try:
        yield NS
    finally:
        _ip("link", "del", host_end, check=False)
        _ip("netns", "del", NS, check=False)


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def client(host: str, port: int = LAN_PORT, ns: str | None = NS, **options: object) -> dict:
    """One request from the namespace (ns) or from this machine (ns=None); the client's JSON answer."""
    cmd = [sys.executable, "-m", "tests.e2e.lan_client", "--host", host, "--port", str(port)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        cmd += [flag] if value is True else [f"{flag}={value}"]  # one word: a key may begin with "-"
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    run = subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(run.stdout)


def https(host: str, path: str, key: str | None = None, **options: object) -> dict:
    return client(host, path=path, https=True, cafile=CA, **({"key": key} if key else {}), **options)


def status(answer: dict) -> int | str:
    return answer.get("status") or answer["error"]


def test_a_deploy_puts_the_proxy_in_front(rig: Rig, lan: str) -> None:
    # The defaults after a whole deploy (the key made on a fresh box: test_service_stage checks its -vv output),
    # its CA re-made to sign this module's client network too.
    serving_rig(rig)
    forget_lan_ca(rig)
    run = deploy(rig, "-vv", "deploy.py", data=DATA)  # -vv: pyinfra prints every command it runs
    FRESH["run"] = run
    assert run.ok, run.log[-3000:]
    assert "lan_serving is direct" not in run.log
    # The server listens on loopback only; nginx on every address.
    server = rig.ssh("rig1", f"ss -Htln 'sport = :{SERVER_PORT}'").split()
    assert server[3] == f"127.0.0.1:{SERVER_PORT}", server
    listening = rig.ssh("rig1", f"sudo ss -Htlnp 'sport = :{LAN_PORT}'")
    assert f"0.0.0.0:{LAN_PORT}" in listening and f"[::]:{LAN_PORT}" in listening and '"nginx"' in listening
    # Port 80 stays closed: Debian's postinst found vllm-rig's placeholder and linked no default site.
    assert rig.ssh("rig1", "ss -Htln 'sport = :80'").strip() == ""
    assert CA.read_text() == rig.ssh("rig1", "cat /etc/vllm-rig/lan/ca.crt")
    modes = rig.ssh("rig1", "sudo stat -c '%n %a %U' /etc/vllm-rig/lan/ca.key /etc/vllm-rig/lan/server.key "
                    "/etc/vllm-rig/lan/api-key.conf")  # fmt: skip
    assert [line.split()[1:] for line in modes.splitlines()] == [["600", "root"]] * 3
    key = service.api_key(rig)
    assert key not in run.log and key not in rig.ssh("rig1", "ps -eo args")
    _the_summarys_curl_works(run.log)


def _the_summarys_curl_works(log: str) -> None:
    """The run ends with the next step: the key read as it says, then its curl line, run as printed, from
    the repository; it gets a completion from the served model through the LAN proxy."""
    said = [line.split("] next: ", 1)[1] for line in log.splitlines() if "[rig1] next: " in line]
    assert said and said[0].startswith(f"clients use https://127.0.0.1:{LAN_PORT}/v1 "), said
    assert '"qwen-local"' in said[0] and "<this host>" not in log
    read_key = next(line for line in said if "read it: " in line).split("read it: ", 1)[1]
    curl = said[-1].removeprefix("try it: ")
    run = subprocess.run(["bash", "-c", f"{read_key} && {curl}"], cwd=paths.REPO, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["model"] == "qwen-local" and answer["choices"][0]["message"]["content"], answer
    stages = [line for line in log.splitlines() if "[rig1] summary: " in line]
    assert any("Driver: " in line and " s" in line for line in stages) and "this run: " in stages[-1], stages


def _root(rig: Rig, command: str) -> str:
    """`command`'s output as root on rig1. The secrets are looked for here, on this side: a command line that
    held one would put it in `ps` and, through sudo, in the journal."""
    return rig.ssh("rig1", f"sudo sh -c {shlex.quote(command)}", timeout=300)


def _files_holding(top: Path, values: list[str]) -> list[str]:
    """Every file under `top` (a directory of the machine's tree, read from this side) holding a value."""
    found, wanted = [], [v.encode() for v in values]
    for path in top.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 64 << 20:
            continue
        data = path.read_bytes()
        if any(v in data for v in wanted):
            found.append(str(path.relative_to(top.parent)))
    return found


def test_planted_secrets_are_nowhere_but_their_root_only_files(rig: Rig, lan: str) -> None:
    """Issue 23: the API key, the HF token, the store and MOK passwords, after a whole deploy with -vv."""
    run = FRESH.get("run")
    if run is None:
        pytest.skip("the module's first deploy did not run")
    assert ">>> " in run.log  # -vv did print the commands
    secrets = {"api key": service.api_key(rig), **PLANTED}
    places = {
        "pyinfra's -vv output": run.log,
        "ps": _root(rig, "ps -eo args"),
        "the journal": _root(rig, "journalctl --no-pager -o cat"),
        "the units": _root(rig, "systemctl cat 'vllm*' 'nginx*'; systemctl show vllm -p Environment -p ExecStart"),
        "the logs": _root(rig, "find /var/lib/vllm-rig/logs /var/log/nginx -type f -exec cat {} +"),
    }
    assert "vllm-rig-model-fetch" in places["the journal"] and "ExecStart=" in places["the units"]  # read them
    for what, value in secrets.items():
        for place, text in places.items():
            assert value not in text, f"{what} in {place}"
    # where each must be: the service's env file and the HF token file, not readable by other users
    assert f"VLLM_API_KEY={secrets['api key']}" in _root(rig, "cat /etc/vllm-rig/vllm.env")
    assert _root(rig, "cat /etc/vllm-rig/hf-token.env").strip() == f"HF_TOKEN={PLANTED['hf_token']}"
    modes = _root(rig, "stat -c '%a %U' /etc/vllm-rig/vllm.env /etc/vllm-rig/hf-token.env").split()
    assert modes == ["640", "root", "600", "root"], modes
    # the control-side secrets reach no file of the host (its tree, read from here)
    tree = rig.machine("rig1").dir
    assert _files_holding(tree / "etc", [PLANTED["hf_token"]]) == ["etc/vllm-rig/hf-token.env"]  # the scan finds
    control_only = [PLANTED["runtime_artifact_store_auth"], PLANTED["secure_boot_mok_password"]]
    for top in ("etc", "var/lib", "var/log", "var/tmp", "opt", "srv", "root", "home", "usr/local"):  # not apt caches
        if (tree / top).is_dir():
            assert _files_holding(tree / top, control_only) == [], top


def test_a_secret_looking_server_environment_value_is_refused_before_any_host(rig: Rig, lan: str) -> None:
    planted = "planted-env-secret-" + "E9" * 8
    run = deploy(rig, "-vv", "tasks/lan.py", data={**DATA, "vllm_env": {"MY_SERVICE_TOKEN": planted}})
    assert not run.ok
    assert "MY_SERVICE_TOKEN looks like a secret" in run.log and planted not in run.log
    assert ">>> " not in run.log  # refused before any command ran on a host
    assert planted not in _root(rig, "journalctl --no-pager -o cat; systemctl cat vllm; ps -eo args")


def test_every_path_without_the_key_is_refused_from_the_lan(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    for path in PATHS:
        refused = 403 if path == "/metrics" else 401  # not an address lan_metrics_allow names: refused first
        assert status(https(BOX, path)) == refused, path
        assert status(https(BOX, path, key="wrong-" + key)) == refused, path
        assert status(https(BOX, path, key=key, scheme="Basic")) == refused, path
    assert status(https(BOX, "/tokenize", method="POST", body='{"prompt": "hi"}')) == 401
    assert status(https(BOX, "/v1/chat/completions", method="POST", body="{}")) == 401
    # With the key (vLLM's scheme check is case-blind): the server answers, /metrics aside (not allowed from .2).
    assert status(https(BOX, "/v1/models", key=key)) == 200
    assert status(https(BOX, "/v1/models", key=key, scheme="bearer")) == 200
    assert status(https(BOX, "/health", key=key)) == 200
    assert status(https(BOX, "/version", key=key)) == 200
    assert status(https(BOX, "/metrics", key=key)) == 403
    assert status(https(BOX, "/metrics/", key=key)) == 403  # vLLM's metrics mount takes every /metrics... path
    # From the allowlisted address, with the key: the metrics.
    for path in ("/metrics", "/metrics/"):  # the second one too: an exact-match rule would let .2 read it
        answer = https(BOX, path, key=key, source=METRICS_CLIENT)
        assert status(answer) == 200 and "vllm:" in answer["body"], (path, answer)
    assert status(https(BOX, "/metrics", source=METRICS_CLIENT)) == 401


# Sets VLLM_API_KEY in the env file (argv 1) to argv 2, as an owner editing it by hand would.
SET_KEY = (
    "import re, sys; p = sys.argv[1]; t = open(p).read(); "
    "open(p, 'w').write(re.sub(r'(?m)^VLLM_API_KEY=.*$', lambda m: 'VLLM_API_KEY=' + sys.argv[2], t))"
)


def refused_spellings(key: str) -> dict[tuple[str, bool], object]:
    """Every bypass spelling from .2 (in lan_allow, not in lan_metrics_allow), with and without the key: those
    that nginx did not refuse (400) or stop at /metrics (403), with what they got."""
    let_through = {}
    for path in BYPASS:
        for keyed in (False, True):
            answer = https(BOX, path, key=key if keyed else None)
            if status(answer) not in (400, 403):
                let_through[(path, keyed)] = (status(answer), answer.get("body", "")[:80])
    return let_through


def test_no_spelling_reaches_the_metrics_past_the_allowlist(rig: Rig, lan: str) -> None:
    """Issue 23: nginx judged the normalised path, vLLM routed the raw one (/metrics/../health was /metrics)."""
    key = service.api_key(rig)
    assert refused_spellings(key) == {}
    assert status(https(BOX, "/health", key=key)) == 200
    models = https(BOX, "/v1/models", key=key)
    assert status(models) == 200 and "qwen" in models["body"], models
    assert status(https(BOX, "/v1/models?q=a/../b", key=key)) == 200  # dots in the query are not the path's


def test_with_health_open_and_a_hand_set_key_nothing_more_gets_in(rig: Rig, lan: str) -> None:
    """lan_health_open: /health alone without the key, every bypass spelling still refused; a key set by hand
    with regex characters in it (the env file edited on the box) is compared literally."""
    key = service.api_key(rig)
    hand = "hand|set.*key$" + "7Q" * 8
    env = "/etc/vllm-rig/vllm.env"
    put_key = f"sudo python3 -c {shlex.quote(SET_KEY)}"
    rig.ssh("rig1", f"{put_key} {env} {shlex.quote(hand)}")
    try:
        run = deploy(rig, "tasks/lan.py", data={**DATA, "lan_health_open": True})
        assert run.ok, run.log[-3000:]
        assert refused_spellings(hand) == {}
        assert status(https(BOX, "/health")) == 200
        assert status(https(BOX, "/version", key=hand)) == 200  # past nginx's check (not a guarded prefix)
        for wrong in ("hand", "x", "7Q", key, hand + "x", hand.upper()):
            assert status(https(BOX, "/version", key=wrong)) == 401, wrong
    finally:
        rig.ssh("rig1", f"{put_key} {env} {shlex.quote(key)}")
        back = deploy(rig, "tasks/lan.py", data=DATA)
    assert back.ok, back.log[-3000:]
    assert status(https(BOX, "/health")) == 401 and status(https(BOX, "/v1/models", key=key)) == 200


def test_a_network_not_allowed_is_refused_on_every_path(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    for path in PATHS:
        answer = https(OUTSIDE, path, key=key, ns=None)
        assert status(answer) == 403 and "lan_allow" in answer["body"], (path, answer)


def test_tls_is_verified_against_the_local_ca(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    assert status(https(BOX, "/v1/models", key=key)) == 200  # the CA from lan-ca/ verifies the veth's address
    untrusted = client(BOX, path="/v1/models", https=True, key=key)  # the system's CAs do not know it
    assert untrusted["error"] == "SSLCertVerificationError" and "local issuer" in untrusted["detail"], untrusted
    wrong_name = https(BOX, "/v1/models", key=key, server_hostname="not-this-box.example")
    assert wrong_name["error"] == "SSLCertVerificationError" and "Hostname mismatch" in wrong_name["detail"]
    names = rig.ssh("rig1", "openssl x509 -in /etc/vllm-rig/lan/server.crt -noout -ext subjectAltName")
    assert f"IP Address:{BOX}" in names and "DNS:rig1.local" in names, names
    plain = client(BOX, path="/v1/models", key=key)  # plain HTTP to the TLS port
    assert status(plain) == 400


def test_loopback_reads_the_metrics(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    through_proxy = https("127.0.0.1", "/metrics", key=key, ns=None)
    assert status(through_proxy) == 200 and "vllm:" in through_proxy["body"]
    on_the_box = client("127.0.0.1", port=SERVER_PORT, path="/metrics", ns=None)  # the server's own port, no key
    assert status(on_the_box) == 200 and "vllm:" in on_the_box["body"]


def test_the_server_port_does_not_connect_from_outside_loopback(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    for path in ("/metrics", "/health", "/v1/models"):
        assert status(client(BOX, port=SERVER_PORT, path=path, key=key)) == "ConnectionRefusedError"
        assert status(client(OUTSIDE, port=SERVER_PORT, path=path, key=key, ns=None)) == "ConnectionRefusedError"


def test_streams_pass_through_as_they_are_written(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    forge.write_knobs(decode_tps=40)
    try:
        messages = [{"role": "user", "content": "hi"}]
        body = {"model": "qwen-local", "stream": True, "max_tokens": 80, "messages": messages}
        answer = https(BOX, "/v1/chat/completions", key=key, method="POST", body=json.dumps(body))
    finally:
        forge.write_knobs(decode_tps=85)
    assert status(answer) == 200 and answer["body"].startswith("data: "), answer
    # The stand-in makes token i ready i / decode_tps after the first (standin/engine.py), MTP or not: at least
    # 79/40 s between its first chunk and its last, by construction; a proxy that buffers hands both over at once.
    print(f"\nSSE through the proxy: first chunk {answer['first_s']} s, last {answer['total_s']} s")
    assert answer["total_s"] - answer["first_s"] > 0.5, answer


def test_a_long_prompt_fits_and_an_absurd_body_is_refused(rig: Rig, lan: str, tmp_path: Path) -> None:
    key = service.api_key(rig)
    # 60K tokens of non-ASCII words as Python's json.dumps writes them (\u00e9: 6 bytes a character): about
    # 1.5 MB, past nginx's default 1 MB limit (client_max_body_size) and well within the prompt's context.
    words = " ".join(["\u00e9" * 4] * 60000)
    body = json.dumps({"model": "qwen-local", "max_tokens": 1, "messages": [{"role": "user", "content": words}]})
    big = tmp_path / "prompt.json"
    big.write_text(body)
    assert big.stat().st_size > 1_400_000
    forge.write_knobs(prefill_tps=200000)
    try:
        answer = https(BOX, "/v1/chat/completions", key=key, method="POST", body_file=big)
    finally:
        forge.write_knobs(prefill_tps=1300)
    assert status(answer) == 200, answer
    too_big = https(BOX, "/v1/chat/completions", key=key, method="POST", declare_length=65 * 2**20)
    assert status(too_big) == 413, too_big


def test_second_run_changes_nothing(rig: Rig, lan: str) -> None:
    run = deploy(rig, "deploy.py", data=DATA)
    assert run.ok and run.changed == [], run.changed


def test_adding_a_client_network_is_one_setting(rig: Rig, lan: str) -> None:
    key = service.api_key(rig)
    pid = rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip()
    run = deploy(rig, "tasks/lan.py", data={**DATA, "lan_allow": [*DATA["lan_allow"], "192.0.2.0/24"]})
    assert run.ok, run.log[-3000:]
    assert sorted(run.changed) == [
        "LAN | nginx checked and reloaded when its files changed",
        f"LAN | nginx site: the LAN on port {LAN_PORT}",
    ], run.changed
    assert status(https(OUTSIDE, "/v1/models", key=key, ns=None)) == 200
    assert status(https(OUTSIDE, "/health", ns=None)) == 401
    assert rig.ssh("rig1", "systemctl show vllm -p MainPID --value").strip() == pid  # the server was not touched
    run = deploy(rig, "tasks/lan.py", data=DATA)
    assert run.ok and status(https(OUTSIDE, "/v1/models", key=key, ns=None)) == 403


def _own_pair(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA of the owner's and a certificate it signed for the veth's address (openssl, as an owner would)."""

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "own-ca.key",
        "-out", "own-ca.crt", "-days", "30", "-subj", "/CN=owner CA")  # fmt: skip
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "box.key", "-out",
        "box.csr", "-subj", "/CN=box")  # fmt: skip
    (tmp / "ext.cnf").write_text(f"subjectAltName = IP:{BOX}, DNS:box.example\n")
    ssl("x509", "-req", "-in", "box.csr", "-CA", "own-ca.crt", "-CAkey", "own-ca.key", "-CAcreateserial",
        "-days", "30", "-extfile", "ext.cnf", "-out", "box.crt")  # fmt: skip
    return tmp / "own-ca.crt", tmp / "box.crt", tmp / "box.key"


def test_own_certificate(rig: Rig, lan: str, tmp_path: Path) -> None:
    key = service.api_key(rig)
    own_ca, cert, cert_key = _own_pair(tmp_path)
    own = {**DATA, "lan_tls": "own", "lan_tls_cert_file": str(cert), "lan_tls_key_file": str(cert_key)}
    run = deploy(rig, "tasks/lan.py", data=own)
    assert run.ok, run.log[-3000:]
    assert cert_key.read_text().splitlines()[1] not in run.log
    assert status(client(BOX, path="/v1/models", https=True, cafile=own_ca, key=key)) == 200
    assert https(BOX, "/v1/models", key=key)["error"] == "SSLCertVerificationError"  # the local CA signs no more
    assert rig.ssh("rig1", "sudo stat -c '%a %U' /etc/vllm-rig/lan/server.key").split() == ["600", "root"]
    # A key that is not the certificate's stops the run before any host is touched, with one line.
    other = tmp_path / "other.key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other],
                   check=True)  # fmt: skip
    bad = deploy(rig, "tasks/lan.py", data={**own, "lan_tls_key_file": str(other)})
    assert not bad.ok and "lan_tls_key_file" in bad.log and "is not the private key" in bad.log
    # Back to the local CA: a new server certificate from it, verified again.
    run = deploy(rig, "tasks/lan.py", data=DATA)
    assert run.ok and status(https(BOX, "/v1/models", key=key)) == 200


def test_direct_mode_says_what_it_exposes(rig: Rig, lan: str) -> None:
    forge.write_knobs(honor_host=True)  # the stand-in binds 0.0.0.0 as told (by default it stays on loopback)
    try:
        run = deploy(rig, "deploy.py", data={**DATA, "lan_serving": "direct"})
        assert run.ok, run.log[-3000:]
        warning = [line for line in run.log.splitlines() if "lan_serving is direct" in line]
        assert len(warning) == 1 and f"0.0.0.0:{SERVER_PORT}" in warning[0] and "/metrics" in warning[0], warning
        # What it says is so: from the LAN, the metrics answer without a key; /v1 wants it.
        assert status(client(BOX, port=SERVER_PORT, path="/metrics")) == 200
        assert status(client(BOX, port=SERVER_PORT, path="/v1/models")) == 401
        assert rig.ssh("rig1", "test -e /etc/nginx/conf.d/vllm-rig-lan.conf || echo gone").strip() == "gone"
        assert status(https(BOX, "/v1/models", key=service.api_key(rig))) == "ConnectionRefusedError"
    finally:
        forge.write_knobs(honor_host=False)
        back = deploy(rig, "deploy.py", data=DATA)
    assert back.ok, back.log[-3000:]
    assert status(client(BOX, port=SERVER_PORT, path="/metrics")) == "ConnectionRefusedError"
    assert status(https(BOX, "/v1/models", key=service.api_key(rig))) == 200
    assert machine.is_running(rig.machine("rig1"))


DRIVER_QUERY = (
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'nvidia-*' 'libnvidia-*' 'cuda-*' 2>/dev/null "
    "| awk '$1 ~ /^.i/ {print $2}'; apt-mark showhold; "
    f"ls -d {' '.join(DRIVER_FILES)} {rig_paths.DRIVER_RECORD} 2>/dev/null; true"
)


def test_remove_takes_what_the_deploy_installed_and_keeps_the_model(rig: Rig, lan: str) -> None:
    """Last in this module: the rig deployed above goes, its driver and CUDA with it (remove_driver: its
    record must still be read before the state directory goes); bin/rig remove is this task."""
    model_dir = DEFAULT_MODEL_DIR  # the sandbox's model_dir is the default, under install_root
    before = rig.ssh("rig1", DRIVER_QUERY).split()
    assert any(p.startswith("nvidia-driver") for p in before) and rig_paths.DRIVER_RECORD in before, before
    run = deploy(rig, "tasks/remove.py", data={"remove_driver": True})
    assert run.ok, run.log[-3000:]
    assert "the driver and CUDA are purged" in run.log, run.log[-3000:]
    assert rig.ssh("rig1", DRIVER_QUERY).split() == []  # no package, hold, apt/modprobe file or record left
    left = rig.ssh(
        "rig1",
        "systemctl list-units --all --plain --no-legend 'vllm*' | awk '{print $1}'; "
        "ls /etc/systemd/system | grep vllm; id -u vllm 2>/dev/null; "
        "ls -A /opt/vllm-rig; ls -A /opt/vllm-rig/models; ls -d /var/lib/vllm-rig /etc/vllm-rig /var/lib/vllm "
        "/etc/nginx/conf.d/vllm-rig-lan.conf 2>/dev/null; true",
    ).split()
    name = Path(model_dir).name  # a link into huggingface_hub's cache beside it (hf-cache/), its fetch lock
    kept = [e for e in left[1:] if e != "hf-cache"]
    assert left[0] == "models" and "hf-cache" in left and all(e.startswith((name, f".{name}.")) for e in kept), left
    assert rig.ssh("rig1", f"test -f {model_dir}/config.json && echo kept").strip() == "kept"
    assert rig.ssh("rig1", "dpkg-query -W -f='${Status}' nginx").strip() == "install ok installed"
    assert status(https(BOX, "/v1/models")) == "ConnectionRefusedError"
    again = deploy(rig, "tasks/remove.py", data={"remove_driver": True})
    assert again.ok and again.changed == [], again.changed
    gone = deploy(rig, "tasks/remove.py", data={"remove_model": True})
    assert gone.ok and rig.ssh("rig1", "ls -A /opt/vllm-rig 2>/dev/null; true").strip() == "", gone.log[-2000:]
