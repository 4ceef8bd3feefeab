"""vllm_rig/stages/runtime/artifact_signing.py: a manifest the control machine signed is offered; one altered
in the store after it was stored, unsigned, signed by another key, or signed earlier and put back after a rebuild
replaced it, is refused with its one line."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from vllm_rig.host import runtime_artifact as ra
from vllm_rig.stages.runtime import artifact_signing as signing
from vllm_rig.stages.runtime import artifacts
from vllm_rig.stages.runtime.artifact_store import StoreSetting, open_store

FP = "ab" * 32


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
    signed = signing.sign(packed(tmp_path), key, FP)
    assert signing.verify(json.dumps(signed, indent=3).encode(), key)["archive_sha256"] == signed["archive_sha256"]


def test_a_manifest_changed_in_the_store_is_refused(tmp_path: Path) -> None:
    """The attacker who rewrote the archive updates archive_sha256 and archive_bytes to match it."""
    key = signing.load_key(tmp_path / "k")
    signed = signing.sign(packed(tmp_path), key, FP)
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
    other = signing.sign(manifest, signing.load_key(tmp_path / "other"), FP)
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
    signed = signing.sign(manifest, signing.load_key(tmp_path / "k"), FP)
    (store / ra.manifest_name(manifest["fingerprint"])).write_text(json.dumps(signed))
    assert ra.read_manifest(store, manifest["fingerprint"])["signature"] == signed["signature"]


def test_the_signer_refuses_a_manifest_of_another_fingerprint(tmp_path: Path) -> None:
    """A host's manifest naming fingerprint A is never signed into B's place in the store."""
    with pytest.raises(signing.UnvouchedError, match="names fingerprint abababababababab, not cdcdcdcdcdcdcdcd"):
        signing.sign(packed(tmp_path), signing.load_key(tmp_path / "k"), "cd" * 32)


# ---- a hostile store puts back the artifact a rebuild replaced


class _Host:
    """The host that packed an artifact in `packed` (get_file copies from there)."""

    name = "rig1"

    def __init__(self, packed: Path | None = None) -> None:
        self.packed = packed

    def get_file(self, remote: str, local: str, **_: Any) -> bool:
        assert self.packed is not None
        shutil.copy(self.packed / Path(remote).name, local)
        return True


def _compiled(tmp: Path, build: str) -> Path:
    runtime = tmp / f"rt-{build}"
    (runtime / "venv").mkdir(parents=True)
    (runtime / "venv" / "lib.so").write_bytes(f"kernels of {build}".encode())
    ra.pack(runtime, FP, tmp / f"packed-{build}")
    return tmp / f"packed-{build}"


def test_an_artifact_put_back_after_a_rebuild_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: v1 of a fingerprint is stored and signed; a rebuild stores v2; the store (or whoever can write
    to it) puts v1's archive and signed manifest back. v1 is signed by our key, and still refused: the record
    beside the key says v2 is the one stored last, so the hosts compile rather than install v1."""
    monkeypatch.setattr(artifacts, "sudo_args", lambda _host: {})
    monkeypatch.setattr(artifacts, "host", _Host())
    key = tmp_path / "keys" / "runtime-artifact.key"
    setting = StoreSetting(str(tmp_path / "store"), key=str(key))
    store = open_store(setting)
    names = (ra.archive_name(FP), ra.manifest_name(FP))

    artifacts._fetch_and_put(_Host(_compiled(tmp_path, "v1")), store, FP, "/r/artifacts", 3, key)
    v1 = {name: (tmp_path / "store" / name).read_bytes() for name in names}
    assert artifacts._vouched(setting, store, FP) == v1[names[1]]

    artifacts._fetch_and_put(_Host(_compiled(tmp_path, "v2")), store, FP, "/r/artifacts", 3, key)
    v1_sha = json.loads(v1[names[1]])["archive_sha256"]
    offered = artifacts._vouched(setting, store, FP)
    assert offered is not None and json.loads(offered)["archive_sha256"] != v1_sha  # v2 now

    for name, data in v1.items():  # the replay
        (tmp_path / "store" / name).write_bytes(data)
    signing.verify(v1[names[1]], signing.load_key(key))  # still our signature...
    assert artifacts._vouched(setting, store, FP) is None  # ...and still refused
    with pytest.raises(signing.UnvouchedError, match="is not the one this control machine stored last"):
        signing.check_current(json.loads(v1[names[1]]), FP, key)
    assert json.loads(signing.record_path(key).read_text()) == {FP: json.loads(offered)["archive_sha256"]}


def test_a_signed_artifact_with_no_record_is_not_offered(tmp_path: Path) -> None:
    """A store shared with a control machine that has the key but not the record: nothing is taken on trust."""
    key = tmp_path / "k"
    manifest = signing.sign(packed(tmp_path), signing.load_key(key), FP)
    with pytest.raises(signing.UnvouchedError, match="has no record of storing it"):
        signing.check_current(manifest, FP, key)
    signing.remember(key, FP, manifest["archive_sha256"])
    signing.check_current(manifest, FP, key)
    with pytest.raises(signing.UnvouchedError, match="names fingerprint"):
        signing.check_current(manifest, "cd" * 32, key)
