#!/usr/bin/env python3
"""The LAN proxy's local CA and server certificate, made with openssl on the host (vllm-rig's lan stage).

    python3 vllm-rig-host.pyz lan_tls check  --dir D [--name N ...]   "ok: ..." or "new: <why>" / "renew: <why>"
    python3 vllm-rig-host.pyz lan_tls ensure --dir D [--name N ...]   make what check finds missing or stale

The CA (ca.key, ca.crt: EC P-256, 10 years) is made once and kept: clients trust it. The server certificate
(server.key, server.crt; 825 days, the longest Apple's clients accept from a private CA) names the host (its
name, <name>.local, localhost), every address it has (global scope and loopback) and each --name; it is made
again when one of those is missing from it, when it expires within 30 days, or when it no longer matches the CA
or its key. Keys are 0600 root; nginx's master process reads them. Stdlib and the openssl command only.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

CA_DAYS = 3650
CERT_DAYS = 825
RENEW_BEFORE_S = 30 * 86400


def openssl(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)


def must(*args: str) -> bytes:
    run = openssl(*args)
    if run.returncode != 0:
        raise SystemExit(f"lan_tls: openssl {args[0]} failed: {run.stderr.decode(errors='replace').strip()}")
    return run.stdout


def host_addresses() -> set[str]:
    """Loopback and every global-scope address (iproute2's JSON), as ipaddress spells them."""
    found = {"127.0.0.1", "::1"}
    run = subprocess.run(["ip", "-j", "addr", "show", "scope", "global"], capture_output=True, text=True, check=False)
    try:
        for link in json.loads(run.stdout or "[]"):
            for info in link.get("addr_info", []):
                if info.get("local"):
                    found.add(str(ipaddress.ip_address(info["local"])))
    except ValueError:
        pass
    return found


def wanted(extra: list[str]) -> tuple[set[str], set[str]]:
    """(DNS names, IP addresses) the server certificate must name."""
    name = socket.gethostname()
    short = name.split(".")[0]
    dns = {name, short, f"{short}.local", "localhost"}
    ips = host_addresses()
    for item in extra:
        try:
            ips.add(str(ipaddress.ip_address(item)))
        except ValueError:
            dns.add(item)
    return dns, ips


def cert_names(cert: Path) -> tuple[set[str], set[str]]:
    text = must("x509", "-in", str(cert), "-noout", "-ext", "subjectAltName").decode()
    dns, ips = set(), set()
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if part.startswith("DNS:"):
            dns.add(part[4:])
        elif part.startswith("IP Address:"):
            ips.add(str(ipaddress.ip_address(part[len("IP Address:") :])))
    return dns, ips


def public_key(path: Path, is_cert: bool) -> bytes:
    if is_cert:
        return must("x509", "-in", str(path), "-noout", "-pubkey")
    return must("pkey", "-in", str(path), "-pubout")


def fingerprint(cert: Path) -> str:
    line = must("x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256").decode().strip()
    return line.split("=", 1)[-1]


def ca_problem(d: Path) -> str | None:
    ca, key = d / "ca.crt", d / "ca.key"
    if not ca.is_file() or not key.is_file():
        return "no local CA yet"
    if public_key(ca, True) != public_key(key, False):
        return "ca.key is not ca.crt's key"
    return None


def server_problem(d: Path, dns: set[str], ips: set[str]) -> str | None:
    cert, key = d / "server.crt", d / "server.key"
    if not cert.is_file() or not key.is_file():
        return "no server certificate yet"
    if openssl("verify", "-CAfile", str(d / "ca.crt"), str(cert)).returncode != 0:
        return "server.crt is not signed by the local CA"
    if public_key(cert, True) != public_key(key, False):
        return "server.key is not server.crt's key"
    if openssl("x509", "-in", str(cert), "-noout", "-checkend", str(RENEW_BEFORE_S)).returncode != 0:
        return "server.crt expires within 30 days"
    has_dns, has_ips = cert_names(cert)
    missing = sorted(dns - has_dns) + sorted(ips - has_ips)
    if missing:
        return f"server.crt does not name {', '.join(missing)}"
    return None


def status(d: Path, extra: list[str]) -> str:
    problem = ca_problem(d)
    if problem:
        return f"new: {problem}"
    problem = server_problem(d, *wanted(extra))
    if problem:
        return f"renew: {problem}"
    end = must("x509", "-in", str(d / "server.crt"), "-noout", "-enddate").decode().strip().split("=", 1)[-1]
    return f"ok: server.crt valid to {end}; CA sha256 {fingerprint(d / 'ca.crt')}"


CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = @alt
[alt]
{alt}
"""


def config(tmp: Path, cn: str, dns: set[str], ips: set[str]) -> Path:
    alt = [f"DNS.{i} = {n}" for i, n in enumerate(sorted(dns), 1)]
    alt += [f"IP.{i} = {a}" for i, a in enumerate(sorted(ips), 1)]
    path = tmp / "openssl.cnf"
    path.write_text(CONFIG.format(cn=cn, alt="\n".join(alt) or "DNS.1 = localhost"))
    return path


def install(src: Path, dest: Path, mode: int) -> None:
    os.chmod(src, mode)
    os.replace(src, dest)


def ensure(d: Path, extra: list[str]) -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    os.umask(0o077)
    done = []
    dns, ips = wanted(extra)
    host = socket.gethostname()
    with tempfile.TemporaryDirectory(dir=d) as name:
        tmp = Path(name)
        if ca_problem(d):
            cnf = config(tmp, f"vllm-rig local CA ({host})", set(), set())
            key, crt = tmp / "ca.key", tmp / "ca.crt"
            must("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
            must("req", "-x509", "-new", "-key", str(key), "-days", str(CA_DAYS), "-sha256", "-config", str(cnf),
                 "-extensions", "v3_ca", "-out", str(crt))  # fmt: skip
            install(key, d / "ca.key", 0o600)
            install(crt, d / "ca.crt", 0o644)
            (d / "server.crt").unlink(missing_ok=True)  # signed by the old CA, if any
            done.append(f"lan_tls: made the local CA {d / 'ca.crt'} (sha256 {fingerprint(d / 'ca.crt')})")
        if server_problem(d, dns, ips):
            cnf = config(tmp, host, dns, ips)
            key, csr, crt = tmp / "server.key", tmp / "server.csr", tmp / "server.crt"
            must("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
            must("req", "-new", "-key", str(key), "-config", str(cnf), "-out", str(csr))
            must("x509", "-req", "-in", str(csr), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                 "-set_serial", f"0x{secrets.randbits(63):x}", "-days", str(CERT_DAYS), "-sha256",
                 "-extfile", str(cnf), "-extensions", "v3_server", "-out", str(crt))  # fmt: skip
            install(key, d / "server.key", 0o600)
            install(crt, d / "server.crt", 0o644)
            done.append(f"lan_tls: made {d / 'server.crt'} for {', '.join(sorted(dns) + sorted(ips))}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("check", "ensure"))
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--name", action="append", default=[], help="an extra DNS name or IP address")
    args = parser.parse_args(argv)
    if args.action == "check":
        print(status(args.dir, args.name))
        return 0
    for line in ensure(args.dir, args.name):
        print(line)
    print(status(args.dir, args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
