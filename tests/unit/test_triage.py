"""The triage bundle's host program (vllm_rig/host/triage.py), run as the host runs it: the host package on stdin,
the spec as its first line. Secrets planted in files and command output must not reach the archive."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.unit.groupdata import profile_data
from vllm_rig.core.host_package import run_from_stdin, stdin_text
from vllm_rig.host.triage import SPEC_ENV
from vllm_rig.stages.triage import bundle
from vllm_rig.validation import load_settings

KEY = "k3y-" + "A1b2C3d4" * 4
TOKEN = "hf_" + "Zz9Yy8Xx7" * 3
# The parts of the bundle the host writes, by their name in the archive.
HOST_PARTS = (
    "gpu-verdict.json",
    "versions/driver.txt",
    "versions/cuda.txt",
    "versions/pip-freeze.txt",
    "versions/commits.txt",
    "versions/runtime.json",
    "model/marker.json",
    "unit/service.txt",
    "journal/service.txt",
    "journal/build.txt",
    "journal/build-log.txt",
    "kernel/nvidia.txt",
)
GIVEN_PARTS = ("settings.json", "preflight.json", "status.json")  # what the control machine adds


def _run(spec: dict) -> dict:
    """As tasks/triage.py runs it: the host package on stdin, the spec as its first (secret) line."""
    command = run_from_stdin("triage", [], python=sys.executable, secret_env=SPEC_ENV)
    proc = subprocess.run(
        ["sh", "-c", command],
        input=stdin_text(json.dumps(spec)),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_secrets_in_files_and_output_are_redacted(tmp_path: Path) -> None:
    env = tmp_path / "vllm.env"
    env.write_text(f"VLLM_API_KEY={KEY}\n")
    hf = tmp_path / "hf-token.env"
    hf.write_text(f"HF_TOKEN={TOKEN}\n")
    log = tmp_path / "build.log"
    log.write_text(f"step 3/8\nAuthorization: Bearer {KEY}\nHF_TOKEN={TOKEN} leaked\n")
    out = tmp_path / "out" / "bundle.tar.gz"
    result = _run(
        {
            "out": str(out),
            "top": "rigX-triage",
            "parts": {
                "log.txt": {"file": str(log)},
                "echo.txt": {"command": f"echo key is {KEY}; echo token is {TOKEN}; exit 3"},
                "missing.json": {"file": str(tmp_path / "absent.json")},
            },
            "given": {"settings.json": json.dumps({"hf_token": "<redacted>", "note": f"copy {TOKEN}"})},
            "secret_files": [str(env), str(hf), str(tmp_path / "no-such.env")],
            "secrets": [],
        }
    )
    assert result["archive"] == str(out) and result["redacted"] == 7
    assert out.stat().st_mode & 0o777 == 0o600
    members = _members(out)
    assert set(members) == {f"rigX-triage/{n}" for n in ("log.txt", "echo.txt", "missing.json", "settings.json")} | {
        "rigX-triage/MANIFEST.json"
    }
    everything = b"".join(members.values())
    assert KEY.encode() not in everything and TOKEN.encode() not in everything
    assert b"Bearer <redacted:VLLM_API_KEY>" in members["rigX-triage/log.txt"]
    assert b"<redacted:HF_TOKEN> leaked" in members["rigX-triage/log.txt"]
    manifest = json.loads(members["rigX-triage/MANIFEST.json"])
    assert manifest["parts"]["echo.txt"]["rc"] == 3 and manifest["parts"]["echo.txt"]["redacted"] == 4
    assert manifest["parts"]["missing.json"]["present"] is False
    assert manifest["redacted_total"] == 7


def test_short_values_are_not_taken_for_secrets(tmp_path: Path) -> None:
    env = tmp_path / "vllm.env"
    env.write_text("# vllm_api_key: none\nOMP_NUM_THREADS=8\n")
    out = tmp_path / "b.tar.gz"
    result = _run(
        {
            "out": str(out),
            "top": "t",
            "parts": {"a.txt": {"command": "echo OMP_NUM_THREADS=8"}},
            "secret_files": [str(env)],
        }
    )
    assert result["redacted"] == 0
    assert b"OMP_NUM_THREADS=8" in _members(out)["t/a.txt"]


def test_settings_go_in_with_every_secret_key_redacted() -> None:
    s = load_settings({**profile_data(), "hf_token": TOKEN})
    data = bundle.redacted_settings(s)
    assert data["hf_token"] == "<redacted>" and TOKEN not in json.dumps(data)
    assert data["model_repo"] == s.model_repo  # the rest is there as set
    assert set(bundle.host_parts(s)) == set(HOST_PARTS)
    assert set(bundle.given_parts(s, "{}", {})) == set(GIVEN_PARTS)
    assert TOKEN in bundle.spec(s, "/x.tar.gz", "t", {})["secrets"]  # redacted wherever the host echoes it


def test_secrets_known_by_their_shape_are_redacted_whatever_their_value(tmp_path: Path) -> None:
    """Issue 23: values nobody listed: a vllm_env secret, --api-key in the server's args, a URL's password, the
    model peer's token file; each planted in the unit, the journal and `ps`-like output."""
    peer = tmp_path / "model-peer.env"
    peer.write_text("VLLM_RIG_PEER_TOKEN=peer-" + "q" * 24 + "\n")
    planted = {
        "unit.txt": "Environment=WANDB_API_KEY=wandb-secret-1234 MY_PASSWORD='pw with spaces' OMP_NUM_THREADS=8\n"
        "ExecStart=/opt/venv/bin/vllm serve /m --api-key=hand-set-key-5678 --port 8000\n",
        "journal.txt": "args: --api-key hand-set-key-5678\nfetch https://alice:s3cretpw@mirror.example/x\n"
        "peer asked with peer-" + "q" * 24 + "\nGITHUB_TOKEN=ghp_abcdefgh12345678\n",
    }
    files = {}
    for name, text in planted.items():
        files[name] = tmp_path / name
        files[name].write_text(text)
    out = tmp_path / "b.tar.gz"
    _run(
        {
            "out": str(out),
            "top": "t",
            "parts": {name: {"file": str(path)} for name, path in files.items()},
            "secret_files": [str(peer)],
        }
    )
    members = _members(out)
    everything = b"".join(members.values())
    for secret in (b"wandb-secret-1234", b"pw with spaces", b"hand-set-key-5678", b"s3cretpw", b"alice", b"q" * 24,
                   b"ghp_abcdefgh12345678"):  # fmt: skip
        assert secret not in everything, secret
    unit = members["t/unit.txt"].decode()
    assert "WANDB_API_KEY=<redacted:WANDB_API_KEY>" in unit and "OMP_NUM_THREADS=8" in unit
    assert "--api-key=<redacted:api-key> --port 8000" in unit
    assert "https://<redacted:userinfo>@mirror.example/x" in members["t/journal.txt"].decode()


def test_the_settings_part_and_the_spec_hold_no_secret_and_no_control_side_one(tmp_path: Path) -> None:
    s = load_settings(
        {
            **profile_data(),
            "vllm_env": {"OMP_NUM_THREADS": "8"},
            "secure_boot_mok_password": "mok-password-1234",
            "runtime_artifact_store": "https://store.example/a/",
            "runtime_artifact_store_auth": "rig:store-password-99",
        }
    )
    # validation refuses a secret-looking vllm_env name; one that got past it is redacted all the same
    s = s.model_copy(update={"vllm_env": {"WANDB_API_KEY": "wandb-secret-1234", "OMP_NUM_THREADS": "8"}})
    data = json.dumps(bundle.redacted_settings(s))
    assert "wandb-secret-1234" not in data and '"OMP_NUM_THREADS": "8"' in data
    spec = json.dumps(bundle.spec(s, "/x.tar.gz", "t", {"settings.json": data}))
    for secret in ("mok-password-1234", "store-password-99", "wandb-secret-1234"):
        assert secret not in spec, secret  # what is sent to the host
    assert "/etc/vllm-rig/model-peer.env" in spec
    # the fetched bundle: a control-side secret the host wrote anyway is redacted here
    out = tmp_path / "b.tar.gz"
    log = tmp_path / "log.txt"
    log.write_text("mokutil said mok-password-1234\n")
    _run({"out": str(out), "top": "t", "parts": {"log.txt": {"file": str(log)}}})
    assert bundle.redact_fetched(out, bundle.control_secrets(s)) == 1
    assert _members(out)["t/log.txt"] == b"mokutil said <redacted:secure_boot_mok_password>\n"
    assert out.stat().st_mode & 0o777 == 0o600


def test_a_secret_in_base64_url_encoded_or_cut_at_the_limit_is_redacted(tmp_path: Path) -> None:
    """Issue 35: exact-string matching let these through."""
    import base64
    import urllib.parse

    from vllm_rig.host.triage import MAX_PART

    env = tmp_path / "vllm.env"
    env.write_text(f"VLLM_API_KEY={KEY}\n")
    basic = base64.b64encode(f"rig:{KEY}".encode()).decode()  # an Authorization: Basic header
    whole = base64.b64encode(f"VLLM_API_KEY={KEY}\n".encode()).decode()  # a file kept as base64
    urlsafe = base64.urlsafe_b64encode(f"x{KEY}".encode()).decode()
    log = tmp_path / "proxy.log"
    log.write_text(
        f"Authorization: Basic {basic}\nconfig {whole}\ntoken {urlsafe}\n"
        f"GET /v1/models?key={urllib.parse.quote(KEY, safe='')}\nwrapped at 60: ...{KEY[:20]}\n{KEY[20:]} rest\n"
    )
    big = tmp_path / "big.log"  # the secret cut by the 8 MiB limit: only its first 12 characters are read
    big.write_text("x" * (MAX_PART - 12) + KEY + "\n")
    out = tmp_path / "bundle.tar.gz"
    _run(
        {
            "out": str(out),
            "top": "t",
            "parts": {"proxy.log": {"file": str(log)}, "big.log": {"file": str(big)}},
            "given": {},
            "secret_files": [str(env)],
            "secrets": [],
        }
    )
    members = _members(out)
    text = members["t/proxy.log"].decode()
    for leaked in (KEY, basic, whole, urlsafe, urllib.parse.quote(KEY, safe=""), KEY[:20], KEY[20:]):
        assert leaked not in text, leaked
    assert text.count("<redacted:VLLM_API_KEY>") >= 6
    assert members["t/big.log"].endswith(b"<redacted:VLLM_API_KEY>") and KEY[:12].encode() not in members["t/big.log"]
