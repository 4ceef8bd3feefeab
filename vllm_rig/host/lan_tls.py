#!/usr/bin/env python3
"""The LAN proxy's local CA and server certificate, made with openssl on the host (vllm-rig's lan stage).

    python3 vllm-rig-host.pyz lan_tls check  --dir D [--name N ...]   "ok: ..." or "new: <why>" / "renew: <why>"
    python3 vllm-rig-host.pyz lan_tls ensure --dir D [--name N ...]   make what check finds missing or stale

The CA (ca.key, ca.crt: EC P-256, 10 years) is made once and kept: clients trust it. It carries critical name
constraints: it may sign only the DNS names and addresses the host had when it was made (so a copy of its key
cannot mint certificates clients accept for another name). The server certificate (server.key, server.crt; 825
days, the longest Apple's clients accept from a private CA) names the host (its name, <name>.local, localhost),
every address it has (global scope and loopback) and each --name, of those the CA permits; it is made again
when one of those is missing from it, when it expires within 30 days, or when it no longer matches the CA or its
key. A name or address the CA does not permit (a new address, a new --name), or a CA without constraints (made
by an older vllm-rig), is kept as it is and said on a "warn: " line after check's state line: re-making the CA
changes what clients trust, so only the owner does it (remove ca.crt, run ensure). Keys are 0600 root; nginx's
master process reads them. Stdlib and the openssl command only.
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
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def openssl(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)


def must(*args: str) -> bytes:
    run = openssl(*args)
    if run.returncode != 0:
        raise SystemExit(f"lan_tls: openssl {args[0]} failed: {run.stderr.decode(errors='replace').strip()}")
    return run.stdout


def host_addresses() -> set[str]:
    """Loopback and every global-scope address but IPv6 privacy ones (iproute2's JSON), as ipaddress spells them."""
    found = {"127.0.0.1", "::1"}
    run = subprocess.run(["ip", "-j", "addr", "show", "scope", "global"], capture_output=True, text=True, check=False)
    try:
        for link in json.loads(run.stdout or "[]"):
            for info in link.get("addr_info", []):
                if info.get("local") and not info.get("temporary"):  # privacy addresses rotate; nobody dials them
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


def ca_constraints(ca: Path) -> tuple[set[str], list[Network]] | None:
    """The DNS names and networks the CA permits; None when it carries no name constraints (it signs any name)."""
    text = must("x509", "-in", str(ca), "-noout", "-ext", "nameConstraints").decode()
    if "Name Constraints" not in text:
        return None
    dns: set[str] = set()
    nets: list[Network] = []
    permitted = False
    for line in text.splitlines()[1:]:
        item = line.strip()
        if item.endswith(":") and not item.startswith(("DNS:", "IP:")):
            permitted = item == "Permitted:"
        elif permitted and item.startswith("DNS:"):
            dns.add(item[4:].lower())
        elif permitted and item.startswith("IP:"):
            address, _, mask = item[3:].partition("/")
            prefix = bin(int(ipaddress.ip_address(mask))).count("1")  # IPv6 networks take no netmask form
            nets.append(ipaddress.ip_network(f"{ipaddress.ip_address(address)}/{prefix}", strict=False))
    return dns, nets


def permitted_by(
    constraints: tuple[set[str], list[Network]] | None, dns: set[str], ips: set[str]
) -> tuple[set[str], set[str]]:
    """Of `dns` and `ips`, what a CA with these constraints may sign (RFC 5280: a DNS constraint permits the
    name and every name under it)."""
    if constraints is None:
        return set(dns), set(ips)
    names, nets = constraints
    ok_dns = {n for n in dns if any(n.lower() == c or n.lower().endswith(f".{c}") for c in names)}
    ok_ips = {a for a in ips if any(ipaddress.ip_address(a) in net for net in nets)}
    return ok_dns, ok_ips


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


REMAKE = "to re-make it, remove {ca} on the host and deploy again, then give clients the new CA certificate"


def signable(d: Path, extra: list[str]) -> tuple[set[str], set[str], list[str]]:
    """(DNS names, addresses) the server certificate is to name, of those wanted, and warnings: what the CA
    does not permit, or that it has no constraints. The CA must be there."""
    dns, ips = wanted(extra)
    constraints = ca_constraints(d / "ca.crt")
    ok_dns, ok_ips = permitted_by(constraints, dns, ips)
    remake = REMAKE.format(ca=d / "ca.crt")
    refused = sorted(dns - ok_dns) + sorted(ips - ok_ips)
    warnings = []
    if constraints is None:
        warnings.append(
            f"the local CA has no name constraints (an older vllm-rig made it): it can sign any name; {remake}"
        )
    elif refused:
        warnings.append(
            f"the local CA does not permit {', '.join(refused)} (it was made before the host had them): server.crt "
            f"leaves them out, so clients cannot reach it by them; {remake}"
        )
    return ok_dns, ok_ips, warnings


def status(d: Path, extra: list[str]) -> list[str]:
    """The state line ("ok: ...", "new: <why>", "renew: <why>") and a "warn: ..." line for each warning."""
    problem = ca_problem(d)
    if problem:
        return [f"new: {problem}"]
    dns, ips, warnings = signable(d, extra)
    notes = [f"warn: {w}" for w in warnings]
    problem = server_problem(d, dns, ips)
    if problem:
        return [f"renew: {problem}", *notes]
    end = must("x509", "-in", str(d / "server.crt"), "-noout", "-enddate").decode().strip().split("=", 1)[-1]
    return [f"ok: server.crt valid to {end}; CA sha256 {fingerprint(d / 'ca.crt')}", *notes]


# OpenSSL 3's `req -x509` adds the subjectKeyIdentifier, and the authorityKeyIdentifier when -CA signs.
CA_EXTENSIONS = ["basicConstraints=critical,CA:TRUE,pathlen:0", "keyUsage=critical,keyCertSign,cRLSign"]
SERVER_EXTENSIONS = [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature",
    "extendedKeyUsage=serverAuth",
]


def names_extensions(dns: set[str], ips: set[str]) -> tuple[str, str]:
    """(the server certificate's subjectAltName, the CA's nameConstraints): both exactly `dns` and `ips`, each
    address a single-address network. The names are checked DNS names or addresses: no comma can split them."""
    nets = [ipaddress.ip_network(a) for a in sorted(ips)]
    alt = [f"DNS:{n}" for n in sorted(dns)] + [f"IP:{a}" for a in sorted(ips)]
    permitted = [f"permitted;DNS:{n}" for n in sorted(dns)]
    permitted += [f"permitted;IP:{n.network_address}/{n.netmask}" for n in nets]
    return (
        "subjectAltName=" + (",".join(alt) or "DNS:localhost"),
        "nameConstraints=critical," + (",".join(permitted) or "permitted;DNS:localhost"),
    )


def new_certificate(key: Path, crt: Path, cn: str, days: int, extensions: list[str], *signer: str) -> None:
    """A new EC P-256 key and its certificate, self-signed or signed by `signer` (-CA, -CAkey). `-config
    /dev/null`: the distribution's openssl.cnf adds no extension of its own."""
    must("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc",
         "-keyout", str(key), "-out", str(crt), "-config", "/dev/null", "-subj", f"/CN={cn}", "-days", str(days),
         "-sha256", "-set_serial", f"0x{secrets.randbits(63):x}", *signer,
         *(arg for ext in extensions for arg in ("-addext", ext)))  # fmt: skip


def install(src: Path, dest: Path, mode: int) -> None:
    os.chmod(src, mode)
    os.replace(src, dest)


def ensure(d: Path, extra: list[str]) -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    os.umask(0o077)
    done = []
    host = socket.gethostname()
    with tempfile.TemporaryDirectory(dir=d) as name:
        tmp = Path(name)
        if ca_problem(d):
            _, constraints = names_extensions(*wanted(extra))
            key, crt = tmp / "ca.key", tmp / "ca.crt"
            new_certificate(key, crt, f"vllm-rig local CA ({host})", CA_DAYS, [*CA_EXTENSIONS, constraints])
            install(key, d / "ca.key", 0o600)
            install(crt, d / "ca.crt", 0o644)
            (d / "server.crt").unlink(missing_ok=True)  # signed by the old CA, if any
            done.append(f"lan_tls: made the local CA {d / 'ca.crt'} (sha256 {fingerprint(d / 'ca.crt')})")
        dns, ips, _ = signable(d, extra)
        if server_problem(d, dns, ips):
            alt, _ = names_extensions(dns, ips)
            key, crt = tmp / "server.key", tmp / "server.crt"
            signer = ("-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"))
            new_certificate(key, crt, host, CERT_DAYS, [*SERVER_EXTENSIONS, alt], *signer)
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
        print("\n".join(status(args.dir, args.name)))
        return 0
    for line in ensure(args.dir, args.name):
        print(line)
    print("\n".join(status(args.dir, args.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
