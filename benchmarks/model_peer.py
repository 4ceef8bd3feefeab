"""Model peers on the sandbox: one file of --mb MB from rig1 to rig2, rig to rig over HTTP (model_serve.py on rig1,
model_peer.py's download on rig2: what the deploy runs) against a relay through the control machine over SFTP
(paramiko, pyinfra's SSH library: get from rig1 to the control side, then put to rig2). Prints each wall time
and MB/s. Figures, not a timed test.

    python -m tests.sandbox up --machines 2 && python benchmarks/model_peer.py [--mb 300]

Both machines share the host's loopback here, so the figures compare the protocols' cost per byte, not a LAN:
on a real rig the relay also sends every byte twice over the control machine's own link (often wifi).
"""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import sys
import tempfile
import time
from pathlib import Path

import paramiko

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.conftest import Rig  # noqa: E402
from tests.e2e.deploys import sandbox_rig  # noqa: E402
from tests.sandbox import paths  # noqa: E402
from vllm_rig.core.host_package import zip_bytes  # noqa: E402
from vllm_rig.host.model_serve import follower_token  # noqa: E402

TOP = "/var/tmp/vllm-rig-peer-bench"
ZIP = f"{TOP}/vllm-rig-host.pyz"
UNIT = "vllm-rig-peer-bench"
FILE = "big.safetensors"


def sftp(rig: Rig, name: str) -> paramiko.SFTPClient:
    m = rig.machine(name)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect("127.0.0.1", port=m.port, username="rig", key_filename=str(rig.key), allow_agent=False)
    return client.open_sftp()


def sh(rig: Rig, name: str, command: str, timeout: float = 600) -> str:
    return rig.ssh(name, f"sudo sh -c {shlex.quote(command)}", timeout=timeout)


def prepare(rig: Rig, mb: int, token: str, port: int) -> str:
    """The host zip on both, a model of one file with its marker on rig1, served; returns its sha256."""
    for name in ("rig1", "rig2"):
        sh(rig, name, f"rm -rf {TOP} && mkdir -p {TOP} && chmod 1777 {TOP}")
        with sftp(rig, name) as client, client.open(ZIP, "wb") as out:
            out.write(zip_bytes())
    model = f"{TOP}/model"
    sh(rig, "rig1", f"mkdir -p {model} && head -c {mb * 1_000_000} /dev/urandom > {model}/{FILE}")
    digest = sh(rig, "rig1", f"sha256sum {model}/{FILE}").split()[0]
    files = {FILE: {"size": mb * 1_000_000, "sha256": digest}}
    marker = {"format": 1, "repo": "bench/one", "revision": "main", "commit": "b" * 40, "files": files}
    sh(rig, "rig1", f"echo {shlex.quote(json.dumps(marker))} > {model}/.vllm-rig-complete.json && chmod -R a+rX {TOP}")
    serve = f"python3 {ZIP} model_serve --dest {model} --repo bench/one --revision main --bind 127.0.0.1 --port {port}"
    serve += " --followers rig2"
    sh(
        rig,
        "rig1",
        f"systemctl stop {UNIT} 2>/dev/null; systemd-run --unit={UNIT} --collect --quiet "
        f"-p Environment=VLLM_RIG_PEER_TOKEN={token} -p RuntimeMaxSec=900 {serve} && sleep 1",
    )
    return digest


def rig_to_rig(rig: Rig, mb: int, token: str, port: int) -> float:
    """rig2 downloads with the deploy's own client code; the wall time measured on rig2."""
    script = (
        f"import sys, time; sys.path.insert(0, {ZIP!r}); from pathlib import Path; "
        "from vllm_rig.host.model_peer import Peer, Want; "
        f"p = Peer('rig1', 'http://127.0.0.1:{port}', {follower_token(token, 'rig2')!r}, 60); t = time.monotonic(); "
        f"p.download(Path({TOP!r}) / 'http', [Want({FILE!r}, {mb * 1_000_000})], lambda: None); "
        "print(time.monotonic() - t)"
    )
    return float(sh(rig, "rig2", f"python3 -c {shlex.quote(script)}").strip().splitlines()[-1])


def through_control(rig: Rig) -> tuple[float, float]:
    """(get, put) wall seconds: rig1 -> the control machine -> rig2, over SFTP."""
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / FILE
        with sftp(rig, "rig1") as one:
            t0 = time.monotonic()
            one.get(f"{TOP}/model/{FILE}", str(local))
            got = time.monotonic() - t0
        with sftp(rig, "rig2") as two:
            t0 = time.monotonic()
            two.put(str(local), f"{TOP}/{FILE}")
            put = time.monotonic() - t0
    return got, put


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=300, help="the file's size in MB (10^6 bytes)")
    args = ap.parse_args(argv)
    rig = sandbox_rig(2)
    token, port = secrets.token_hex(24), paths.MODEL_PEER_PORT_BASE + 1
    digest = prepare(rig, args.mb, token, port)
    try:
        direct = rig_to_rig(rig, args.mb, token, port)
        got, put = through_control(rig)
        http_ok = sh(rig, "rig2", f"sha256sum {TOP}/http/{FILE}").split()[0] == digest
        relay_ok = sh(rig, "rig2", f"sha256sum {TOP}/{FILE}").split()[0] == digest
    finally:
        sh(rig, "rig1", f"systemctl stop {UNIT} 2>/dev/null; true")
        for name in ("rig1", "rig2"):
            sh(rig, name, f"rm -rf {TOP}")
    relay = got + put

    def rate(seconds: float) -> str:
        return f"{args.mb / seconds:7.1f} MB/s"

    print(f"Model peer transfer of one {args.mb} MB file, rig1 -> rig2 on the sandbox (shared loopback):")
    print(f"  rig to rig, HTTP (model_serve.py -> model_peer.py)  {direct:6.2f}s  {rate(direct)}  sha256 ok: {http_ok}")
    print(f"  through the control machine, SFTP get + put         {relay:6.2f}s  {rate(relay)}  sha256 ok: {relay_ok}")
    print(f"    get from rig1 {got:6.2f}s, put to rig2 {put:6.2f}s")
    print(f"  relay / direct = {relay / direct:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
