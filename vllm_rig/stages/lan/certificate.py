"""The owner's certificate and key for lan_tls: own, read on the control machine and checked before any host
is touched: both PEM, the key the certificate's, the certificate not expired."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization


def read(path: str) -> bytes:
    return Path(path).expanduser().read_bytes()


def own_certificate_problem(cert_file: str, key_file: str) -> tuple[str, str] | None:
    """(setting, message) for the first thing wrong with the pair, or None. The key's bytes never reach a message."""
    try:
        certs = x509.load_pem_x509_certificates(read(cert_file))
    except OSError as err:
        return "lan_tls_cert_file", f"cannot be read on the control machine ({err.strerror})"
    except ValueError:
        return "lan_tls_cert_file", "is not a PEM certificate (-----BEGIN CERTIFICATE-----)"
    try:
        key = serialization.load_pem_private_key(read(key_file), password=None)
    except OSError as err:
        return "lan_tls_key_file", f"cannot be read on the control machine ({err.strerror})"
    except (ValueError, TypeError):
        return "lan_tls_key_file", "is not an unencrypted PEM private key (nginx needs it without a passphrase)"
    leaf = certs[0]
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, public) != leaf.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        return "lan_tls_key_file", "is not the private key of lan_tls_cert_file's (first) certificate"
    if leaf.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        return "lan_tls_cert_file", f"expired on {leaf.not_valid_after_utc:%Y-%m-%d}"
    return None
