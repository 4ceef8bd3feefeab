"""vllm_rig/stages/runtime/artifact_signing.py: a manifest the control machine signed is offered; one altered
in the store after it was stored, unsigned, or signed by another key is refused with its one line."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from vllm_rig.host import runtime_artifact as ra
from vllm_rig.stages.runtime import artifact_signing as signing


def packed(tmp: Path) -> dict:
    runtime = tmp / "rt"
    (runtime / "venv").mkdir(parents=True)
    (runtime / "venv" / "lib.so").write_bytes(b"kernels")
    return ra.pack(runtime, "ab" * 32, tmp / "store")


def test_the_key_is_made_once_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "runtime-artifact.key"
    first = signing.load_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.key_id(signing.load_key(path).public_key()) == signing.key_id(first.public_key())


def test_a_signed_manifest_verifies_in_any_spelling(tmp_path: Path) -> None:
    key = signing.load_key(tmp_path / "k")
    signed = signing.sign(packed(tmp_path), key)
    assert signing.verify(json.dumps(signed, indent=3).encode(), key)["archive_sha256"] == signed["archive_sha256"]


def test_a_manifest_changed_in_the_store_is_refused(tmp_path: Path) -> None:
    """The attacker who rewrote the archive updates archive_sha256 and archive_bytes to match it."""
    key = signing.load_key(tmp_path / "k")
    signed = signing.sign(packed(tmp_path), key)
    altered = {**signed, "archive_sha256": "0" * 64, "archive_bytes": 1}
    with pytest.raises(signing.UnvouchedError, match="does not match its signature: changed after it was stored"):
        signing.verify(json.dumps(altered).encode(), key)
    files = json.loads(json.dumps(signed))
    files["files"]["venv/lib.so"]["sha256"] = "1" * 64
    with pytest.raises(signing.UnvouchedError, match="does not match its signature"):
        signing.verify(json.dumps(files).encode(), key)


def test_unsigned_or_another_keys_manifest_is_refused(tmp_path: Path) -> None:
    key = signing.load_key(tmp_path / "k")
    manifest = packed(tmp_path)
    with pytest.raises(signing.UnvouchedError, match="is not signed"):
        signing.verify(json.dumps(manifest).encode(), key)
    other = signing.sign(manifest, signing.load_key(tmp_path / "other"))
    with pytest.raises(signing.UnvouchedError, match="not runtime_artifact_key's"):
        signing.verify(json.dumps(other).encode(), key)
    forged = {**other, "signature": {**other["signature"], "key": signing.key_id(key.public_key())}}
    with pytest.raises(signing.UnvouchedError, match="does not match its signature"):
        signing.verify(json.dumps(forged).encode(), key)
    with pytest.raises(signing.UnvouchedError, match="not JSON"):
        signing.verify(b"{", key)


def test_a_key_file_of_another_kind_is_one_line(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "k").write_bytes(pem)
    with pytest.raises(signing.UnvouchedError, match="is not an ed25519 private key"):
        signing.load_key(tmp_path / "k")


def test_the_host_reads_a_signed_manifest_as_before(tmp_path: Path) -> None:
    """The signature is one more key in the manifest: runtime_artifact.py on the host ignores it."""
    manifest = packed(tmp_path)
    store = tmp_path / "store"
    signed = signing.sign(manifest, signing.load_key(tmp_path / "k"))
    (store / ra.manifest_name(manifest["fingerprint"])).write_text(json.dumps(signed))
    assert ra.read_manifest(store, manifest["fingerprint"])["signature"] == signed["signature"]
