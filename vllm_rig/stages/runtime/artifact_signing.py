"""The control machine's word for a runtime artifact: an ed25519 signature over its manifest.

Whoever can write to the store could otherwise replace both files of an artifact, and the manifest that
vouches for an archive would come from the same place as the archive. So the control machine signs each
manifest when it stores an artifact (after checking the archive it fetched against it), and offers a host
only a manifest whose signature its own key verifies; the host then checks the archive's sha256 and every
file against that manifest (vllm_rig/host/runtime_artifact.py). A manifest altered in the store is refused
here, in one line, and the host compiles.

A signature alone would vouch for every artifact the key ever signed: after a rebuild replaced v1 of a
fingerprint with v2, whoever can write to the store could put v1 back. So the control machine also keeps a
record beside the key (runtime-artifacts.record.json: the archive sha256 it last stored, per fingerprint) and
offers only the manifest that names that archive; and it signs only a manifest that names the fingerprint
being stored.

The key (runtime_artifact_key) is a PEM file on the control machine, made with mode 0600 on first use.
Control machines that share a store share the key and the record by copying both files; one without them
signs with its own and compiles once where another's artifact is stored. docs/runtime.md says how to rotate
the key and what that invalidates.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNATURE = "signature"
RECORD_NAME = "runtime-artifacts.record.json"


class UnvouchedError(Exception):
    """Why a manifest is not one this control machine signed (one line)."""


def signed_bytes(manifest: dict[str, Any]) -> bytes:
    """What the signature covers: the manifest without its signature, in one canonical spelling."""
    rest = {k: v for k, v in manifest.items() if k != SIGNATURE}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_key(path: Path) -> Ed25519PrivateKey:
    """The key at `path`, made there (0600, never overwritten) when there is none."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another run of this control machine made it a moment ago
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise UnvouchedError(f"runtime_artifact_key {path} is not an ed25519 private key")
    return key


def sign(manifest: dict[str, Any], key: Ed25519PrivateKey, fingerprint: str) -> dict[str, Any]:
    """The manifest with this key's signature in it; refused when it names another fingerprint than the one
    being stored (a host's manifest must not be signed into another fingerprint's place)."""
    named = manifest.get("fingerprint")
    if named != fingerprint:
        raise UnvouchedError(
            f"the manifest names fingerprint {str(named)[:16]}, not {fingerprint[:16]} being stored: not signed"
        )
    signature = base64.b64encode(key.sign(signed_bytes(manifest))).decode()
    return {**manifest, SIGNATURE: {"key": key_id(key.public_key()), "ed25519": signature}}


def verify(data: bytes, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The manifest `data` holds, if this key signed it; else UnvouchedError."""
    try:
        manifest = json.loads(data)
    except ValueError:
        raise UnvouchedError("its manifest is not JSON") from None
    found = manifest.get(SIGNATURE) if isinstance(manifest, dict) else None
    if not isinstance(found, dict) or not isinstance(found.get("ed25519"), str):
        raise UnvouchedError("its manifest is not signed (stored before artifacts were signed, or not by a deploy)")
    public = key.public_key()
    if found.get("key") != key_id(public):
        raise UnvouchedError(f"its manifest is signed by key {str(found.get('key'))[:16]}, not runtime_artifact_key's")
    try:
        public.verify(base64.b64decode(found["ed25519"], validate=True), signed_bytes(manifest))
    except (InvalidSignature, ValueError):
        raise UnvouchedError("its manifest does not match its signature: changed after it was stored") from None
    return manifest


def record_path(key_path: Path) -> Path:
    """The control machine's record of what it last stored, beside runtime_artifact_key."""
    return key_path.with_name(RECORD_NAME)


def _read_record(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        raise UnvouchedError(f"{path} is not JSON: move it aside (every host then compiles once)") from None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def remember(key_path: Path, fingerprint: str, archive_sha256: str) -> None:
    """Record `archive_sha256` as the one artifact of `fingerprint` to offer from now on (locked, atomic)."""
    path = record_path(key_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_record(path)
        record[fingerprint] = archive_sha256
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


def check_current(manifest: dict[str, Any], fingerprint: str, key_path: Path) -> None:
    """UnvouchedError unless the signed `manifest` is the artifact of `fingerprint` this control machine stored
    last: a manifest it signed earlier (a replaced artifact put back), or for another fingerprint, is refused."""
    named = manifest.get("fingerprint")
    if named != fingerprint:
        raise UnvouchedError(f"its manifest names fingerprint {str(named)[:16]}, not {fingerprint[:16]}")
    want = _read_record(record_path(key_path)).get(fingerprint)
    got = str(manifest.get("archive_sha256"))
    if want is None:
        raise UnvouchedError(
            f"this control machine has no record of storing it ({RECORD_NAME} beside runtime_artifact_key)"
        )
    if got != want:
        raise UnvouchedError(
            f"its archive {got[:16]} is not the one this control machine stored last ({want[:16]}): an older "
            "artifact put back"
        )
