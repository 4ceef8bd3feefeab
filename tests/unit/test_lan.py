"""The LAN stage's pieces on the control side: the owner's certificate checked before any host is touched, the
nginx site rendered from settings, the local CA tool and the key map against the real openssl and sh."""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from tests.unit.groupdata import profile_data
from vllm_rig.core.files import rendered
from vllm_rig.core.host_package import zip_bytes
from vllm_rig.core.secrets import KeyFile
from vllm_rig.host import lan_keys
from vllm_rig.stages.lan.deploy import TEMPLATE, site_context
from vllm_rig.stages.lan.facts import KeyMap, LanTls
from vllm_rig.validation import SettingsError, load_settings

HOST = Path(__file__).resolve().parents[2] / "vllm_rig" / "host"


def _settings(**changes: object):
    return load_settings({**profile_data(), **changes})


def _site(ipv6: bool = True, **changes: object) -> str:
    s = _settings(**changes)
    return rendered("/x", TEMPLATE, **site_context(s, ipv6=ipv6)).content.decode()


# ---- the owner's certificate (lan_tls: own)


def _pair(tmp: Path, days: int = 30, name: str = "box") -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=2 * abs(days)))
        .not_valid_after(now + datetime.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def _own(cert: Path | str | None, key: Path | str | None, **more: object):
    c = None if cert is None else str(cert)
    k = None if key is None else str(key)
    return _settings(lan_tls="own", lan_tls_cert_file=c, lan_tls_key_file=k, **more)


def _refusal(cert: Path | str | None, key: Path | str | None) -> str:
    with pytest.raises(SettingsError) as err:
        _own(cert, key)
    assert len(err.value.lines) == 1, err.value.lines
    return err.value.lines[0]


def test_own_certificate_and_its_key_are_accepted(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path)
    assert _own(cert, key).lan_tls == "own"


def test_own_certificate_problems_are_one_line_each(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path)
    _, other_key = _pair(tmp_path, name="other")
    old_cert, old_key = _pair(tmp_path, days=-1, name="old")
    (tmp_path / "not.pem").write_text("hello\n")
    assert "lan_tls_key_file" in _refusal(cert, None) and "must be set" in _refusal(cert, None)
    assert "is not the private key" in _refusal(cert, other_key)
    assert "expired" in _refusal(old_cert, old_key)
    assert "cannot be read" in _refusal(tmp_path / "missing.crt", key)
    assert "not a PEM certificate" in _refusal(tmp_path / "not.pem", key)
    assert "not an unencrypted PEM private key" in _refusal(cert, tmp_path / "not.pem")
    line = _refusal(cert, other_key)
    assert "BEGIN" not in line and other_key.read_text().splitlines()[1] not in line  # the key never in a line


# ---- the nginx site


def test_the_key_is_asked_for_on_every_path() -> None:
    site = _site()
    blocks = site.split("location ")[1:]
    assert [b.split("{", 1)[0].strip() for b in blocks] == ["^~ /metrics", "/"]  # nothing else is routed
    assert all("if ($vllm_rig_key_ok = 0)" in b and "return 401" in b for b in blocks)
    assert "if ($vllm_rig_client_ok = 0) {\n        return 403" in site  # before any location: the network


def test_health_alone_opens_by_setting() -> None:
    site = _site(lan_health_open=True)
    health = site.split("location = /health {", 1)[1].split("}", 1)[0]
    assert "proxy_pass" in health and "vllm_rig_key_ok" not in health
    assert site.count("return 401") == 2  # /metrics and everything else still need the key


def test_networks_upstream_and_limits_come_from_settings() -> None:
    site = _site(lan_allow=["192.168.7.0/24"], lan_metrics_allow=["192.168.7.9/32"], lan_port=9443, vllm_port=8123)
    client = site.split("geo $vllm_rig_client_ok {", 1)[1].split("}", 1)[0].split()
    metrics = site.split("geo $vllm_rig_metrics_ok {", 1)[1].split("}", 1)[0].split()
    assert client == ["default", "0;", "127.0.0.0/8", "1;", "::1/128", "1;", "192.168.7.0/24", "1;"]
    assert metrics == ["default", "0;", "127.0.0.0/8", "1;", "::1/128", "1;", "192.168.7.9/32", "1;"]
    assert "server 127.0.0.1:8123;" in site and "listen 9443 ssl;" in site and "listen [::]:9443 ssl;" in site
    assert "proxy_buffering off;" in site and "client_max_body_size 64m;" in site
    assert "proxy_read_timeout 1800s;" in site
    assert "proxy_read_timeout 600s;" in _site(lan_read_timeout_s=600)
    assert "client_max_body_size 8m;" in _site(lan_max_body_mb=8)


def test_without_ipv6_nginx_listens_on_ipv4_only() -> None:
    site = _site(ipv6=False, lan_allow=["10.0.0.0/8", "fd00::/8"])
    assert "listen [::]" not in site and "::1/128" not in site and "fd00::/8" not in site and "10.0.0.0/8 1;" in site


def test_proxy_binds_the_server_to_loopback_and_direct_to_every_address() -> None:
    assert _settings().server_host == "127.0.0.1"
    assert _settings(lan_serving="direct").server_host == "0.0.0.0"
    assert _settings(lan_serving="direct", vllm_host="127.0.0.1").server_host == "127.0.0.1"


# ---- the key map, made by the host program lan_keys, read back by the fact with the real sh


def _key_map_fact(tmp: Path) -> str:
    package = tmp / "vllm-rig-host.pyz"  # the host package as the deploy sends it
    if not package.exists():
        package.write_bytes(zip_bytes())
    command = KeyMap().command(str(package), str(tmp / "keys"), str(tmp / "vllm.env"), str(tmp / "api-key.conf"))
    run = subprocess.run(command, shell=True, capture_output=True, text=True)
    return KeyMap().process(run.stdout.splitlines())


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_key_map_is_made_from_the_keys_and_read_back(tmp_path: Path) -> None:
    env, map_file = tmp_path / "vllm.env", tmp_path / "api-key.conf"
    env.write_text("VLLM_API_KEY=abc-DEF_123\n")
    assert _key_map_fact(tmp_path) == "differs"
    lan_keys.main(["map", "--dir", str(tmp_path / "keys"), "--env-file", str(env), "--out", str(map_file)])
    text = map_file.read_text()
    assert '"~^(?i:bearer) abc\\-DEF\\_123$" server;' in text  # escaped: literal
    assert 'default "Bearer abc-DEF_123";' in text and oct(map_file.stat().st_mode & 0o777) == "0o600"
    assert _key_map_fact(tmp_path) == "same"
    lan_keys.make(str(tmp_path / "keys"), "laptop")  # a new client key: the map must change
    assert _key_map_fact(tmp_path) == "differs"
    lan_keys.main(["map", "--dir", str(tmp_path / "keys"), "--env-file", str(env), "--out", str(map_file)])
    assert " laptop;" in map_file.read_text() and _key_map_fact(tmp_path) == "same"
    env.write_text("VLLM_API_KEY=another\n")
    assert _key_map_fact(tmp_path) == "differs"
    env.write_text("# vllm_api_key: none\n")
    assert _key_map_fact(tmp_path) == "nokey"


def test_two_key_lines_are_refused_not_read_two_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rotation by hand that left the old line: nginx's map would take one, systemd gives vLLM the last."""
    env = tmp_path / "vllm.env"
    env.write_text("VLLM_API_KEY=old-key\nVLLM_API_KEY=new-key\n")
    out = tmp_path / "api-key.conf"
    assert lan_keys.main(["map", "--dir", str(tmp_path / "keys"), "--env-file", str(env), "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert not out.exists() and "old-key" not in said.out + said.err and "new-key" not in said.out + said.err
    assert said.err.count("\n") == 1 and "2 VLLM_API_KEY= lines" in said.err
    state = KeyFile().process(
        subprocess.run(KeyFile().command(str(env)), shell=True, capture_output=True, text=True).stdout.splitlines()
    )
    assert state["keys"] == 2
    env.write_text("VLLM_API_KEY=new-key\n")
    assert lan_keys.main(["map", "--dir", str(tmp_path / "keys"), "--env-file", str(env), "--out", str(out)]) == 0
    assert "new\\-key" in out.read_text()


# ---- the local CA tool, with the real openssl


def _lan_tls() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lan_tls", HOST / "lan_tls.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _host(tls: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host lan_tls sees: its name and addresses fixed, so what the CA permits is known."""
    monkeypatch.setattr(tls.socket, "gethostname", lambda: "rig-x")
    monkeypatch.setattr(tls, "host_addresses", lambda: {"127.0.0.1", "::1", "192.0.2.10", "2001:db8::10"})


NEEDS_OPENSSL = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@NEEDS_OPENSSL
def test_local_ca_is_made_once_and_the_certificate_again_when_it_must(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = _lan_tls()
    _host(tls, monkeypatch)
    d = tmp_path / "lan"
    assert tls.status(d, [])[0].startswith("new: no local CA")
    tls.ensure(d, ["box.example", "10.9.9.9"])
    assert tls.status(d, ["box.example", "10.9.9.9"])[0].startswith("ok: ")
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in d.iterdir()} == {
        "ca.crt": "0o644",
        "ca.key": "0o600",
        "server.crt": "0o644",
        "server.key": "0o600",
    }
    ca = (d / "ca.crt").read_bytes()
    # a name under one the CA permits: the certificate is made again, by the same CA
    assert tls.status(d, ["api.box.example"]) == ["renew: server.crt does not name api.box.example"]
    tls.ensure(d, ["api.box.example"])
    assert (d / "ca.crt").read_bytes() == ca  # the CA clients trust stays
    assert tls.status(d, ["api.box.example"])[0].startswith("ok: ")
    verify = subprocess.run(["openssl", "verify", "-CAfile", d / "ca.crt", d / "server.crt"], capture_output=True)
    assert verify.returncode == 0, verify
    tls.CERT_DAYS = 10  # a certificate that ends within 30 days is made again
    (d / "server.crt").unlink()
    tls.ensure(d, [])
    assert tls.status(d, []) == ["renew: server.crt expires within 30 days"]
    (d / "server.key").write_bytes((d / "ca.key").read_bytes())
    assert tls.status(d, []) == ["renew: server.key is not server.crt's key"]


def _leaf(ca_dir: Path, dns: list[str], ips: list[str]) -> x509.Certificate:
    """A server certificate for these names, signed with the CA's key as whoever holds ca.key could sign one."""
    ca = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns or ips)[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _verified(ca_dir: Path, leaf: x509.Certificate, name: str) -> bool:
    """Whether cryptography's own path validation (webpki rules, name constraints included) accepts the leaf
    for `name` with only the local CA trusted."""
    ca = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    try:
        subject: verification.DNSName | verification.IPAddress = verification.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        subject = verification.DNSName(name)
    verifier = verification.PolicyBuilder().store(verification.Store([ca])).build_server_verifier(subject)
    try:
        verifier.verify(leaf, [])
    except verification.VerificationError:
        return False
    return True


def _openssl_verify(ca_dir: Path, leaf: x509.Certificate, tmp: Path) -> subprocess.CompletedProcess[str]:
    pem = tmp / "leaf.pem"
    pem.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    return subprocess.run(["openssl", "verify", "-CAfile", ca_dir / "ca.crt", pem], capture_output=True, text=True)


@NEEDS_OPENSSL
def test_local_ca_may_sign_only_the_hosts_names_and_addresses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tls = _lan_tls()
    _host(tls, monkeypatch)
    d = tmp_path / "lan"
    tls.ensure(d, ["box.example", "10.9.9.9"])
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.excluded_subtrees is None
    permitted = constraints.value.permitted_subtrees or []
    assert {n.value for n in permitted if isinstance(n, x509.DNSName)} == {
        "rig-x", "rig-x.local", "localhost", "box.example"
    }  # fmt: skip
    assert {n.value for n in permitted if isinstance(n, x509.IPAddress)} == {
        ipaddress.ip_network(n) for n in ("127.0.0.1/32", "::1/128", "192.0.2.10/32", "2001:db8::10/128", "10.9.9.9/32")
    }
    assert len(permitted) == 9  # nothing else: no other name types

    # the host's own certificate, and a new one for its names, verify with both openssl and cryptography
    server = x509.load_pem_x509_certificate((d / "server.crt").read_bytes())
    made = {c: {type(e.value).__name__: e.critical for e in c.extensions} for c in (ca, server)}
    ids = {"SubjectKeyIdentifier": False}  # openssl's own; the distribution's openssl.cnf adds nothing
    assert made[ca] == {"BasicConstraints": True, "KeyUsage": True, "NameConstraints": True, **ids}
    assert made[server] == {
        **{"BasicConstraints": True, "KeyUsage": True, "ExtendedKeyUsage": False, "SubjectAlternativeName": False},
        **{**ids, "AuthorityKeyIdentifier": False},
    }
    for name in ("rig-x", "rig-x.local", "box.example", "localhost", "192.0.2.10", "10.9.9.9", "2001:db8::10"):
        assert _verified(d, server, name), name
    assert _openssl_verify(d, server, tmp_path).returncode == 0
    own = _leaf(d, ["box.example", "api.box.example"], ["192.0.2.10"])
    assert _verified(d, own, "api.box.example") and _openssl_verify(d, own, tmp_path).returncode == 0

    # whoever holds ca.key cannot mint a certificate clients accept for another name or address
    for dns, ips, name in (
        (["bank.example"], [], "bank.example"),
        (["box.example.evil"], [], "box.example.evil"),
        ([], ["192.0.2.1"], "192.0.2.1"),
        (["box.example", "bank.example"], [], "box.example"),  # one name outside is enough to refuse it all
    ):
        rogue = _leaf(d, dns, ips)
        assert not _verified(d, rogue, name), name
        checked = _openssl_verify(d, rogue, tmp_path)
        assert checked.returncode != 0 and "permitted subtree violation" in checked.stdout + checked.stderr, checked


def _unconstrained_ca(d: Path) -> None:
    """A local CA as vllm-rig made it before name constraints: same profile, no NameConstraints."""
    d.mkdir(parents=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vllm-rig local CA (rig-x)")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(key, hashes.SHA256())
    )
    (d / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "ca.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@NEEDS_OPENSSL
def test_a_ca_clients_already_trust_is_kept_and_what_it_cannot_do_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = _lan_tls()
    _host(tls, monkeypatch)
    old = tmp_path / "old"
    _unconstrained_ca(old)
    before = (old / "ca.crt").read_bytes()
    tls.ensure(old, [])
    state = tls.status(old, [])
    assert (old / "ca.crt").read_bytes() == before  # clients pinned it: a re-run does not replace it
    assert state[0].startswith("ok: ") and len(state) == 2
    assert state[1].startswith("warn: the local CA has no name constraints") and str(old / "ca.crt") in state[1]
    assert _verified(old, x509.load_pem_x509_certificate((old / "server.crt").read_bytes()), "rig-x")

    # a constrained CA and a name it was not made for: kept, the name left out and said
    d = tmp_path / "lan"
    tls.ensure(d, [])
    ca = (d / "ca.crt").read_bytes()
    tls.ensure(d, ["other.example", "10.1.1.1"])
    state = tls.status(d, ["other.example", "10.1.1.1"])
    assert (d / "ca.crt").read_bytes() == ca
    assert state[0].startswith("ok: ")
    assert state[1].startswith("warn: the local CA does not permit other.example, 10.1.1.1")
    server = x509.load_pem_x509_certificate((d / "server.crt").read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "other.example" not in sans.get_values_for_type(x509.DNSName)
    assert _openssl_verify(d, server, tmp_path).returncode == 0  # the certificate it serves still verifies

    # the owner re-makes it as the warning says: remove ca.crt, run again; the new CA permits the names
    (d / "ca.crt").unlink()
    tls.ensure(d, ["other.example", "10.1.1.1"])
    assert (d / "ca.crt").read_bytes() != ca
    assert tls.status(d, ["other.example", "10.1.1.1"])[1:] == []
    assert _verified(d, x509.load_pem_x509_certificate((d / "server.crt").read_bytes()), "other.example")


def test_lan_tls_fact_reads_the_state_and_its_warnings() -> None:
    fact = LanTls()
    lines = ["@@state", "ok: server.crt valid to X; CA sha256 AB", "warn: the local CA has no name constraints"]
    assert fact.process(lines) == {
        "state": "ok: server.crt valid to X; CA sha256 AB",
        "warnings": ["the local CA has no name constraints"],
    }


@pytest.mark.parametrize(("site", "reads"), [("ours", 1), ("other", 1), ("absent", 3)])
def test_the_lan_host_is_read_once_per_run_once_its_default_site_is_settled(site: str, reads: int) -> None:
    from pyinfra.context import ctx_host

    from vllm_rig.stages.lan.facts import lan_host

    class Box:  # a run's Host object
        name = "box"
        asked = 0

        def get_fact(self, fact: object, **kwargs: object) -> dict[str, object]:
            self.asked += 1
            return {"ipv6": True, "default_site": site}

    box = Box()
    with ctx_host.use(box):
        for _ in range(3):  # the LAN stage's planning, its default-site operation, the front's planning
            assert lan_host("/etc/nginx/sites-enabled/default")["ipv6"]
    assert box.asked == reads  # absent: the operation writes it, so every reader asks again
