"""bin/rig check's first step and bin/rig init's refusals: each connection mistake is one line with the next
step, tried against real local servers (a closed loopback port, a TCP server that is no SSH server, paramiko's
own SSH server with a key it does not accept)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from vllm_rig import reach
from vllm_rig.reach import address_problem, diagnose, key_problem, login_problem


@pytest.mark.parametrize(
    ("address", "line"),
    [
        ("192.168.1.500", "192.168.1.500 is not an IP address: each of the four numbers is 0 to 255 (500 is not)"),
        ("192,168,1,50", "192,168,1,50 has commas: an IP address is written with dots, like 192.168.1.50"),
        ("ubuntu@192.168.1.50", "ubuntu@192.168.1.50 has a user in it: the address is 192.168.1.50; the user "
                                "(ubuntu) is given apart, as the SSH login"),
        ("192.168.1", "192.168.1 is not an IP address: four numbers with dots between, like 192.168.1.50"),
    ],
)  # fmt: skip
def test_addresses_that_cannot_be_right(address: str, line: str) -> None:
    assert address_problem(address) == line


@pytest.mark.parametrize("address", ["192.168.1.50", "gpubox.lan", "gpubox", "::1", "fe80::1%eth0", "10.0.0.255"])
def test_addresses_that_can_be_right(address: str) -> None:
    assert address_problem(address) is None


def test_a_public_key_by_its_name_or_by_what_it_holds(tmp_path: Path) -> None:
    assert key_problem("~/.ssh/id_ed25519.pub") == (
        "~/.ssh/id_ed25519.pub is the public key: give the private one (~/.ssh/id_ed25519)"
    )
    renamed = tmp_path / "mykey"
    renamed.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI me@laptop\n")
    assert key_problem(str(renamed)) == (
        f"{renamed} holds a public key (ssh-ed25519): give the private one, the file without .pub"
    )
    private = tmp_path / "id"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert key_problem(str(private)) is None and key_problem(str(tmp_path / "absent")) is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_names_the_port(tmp_path: Path) -> None:
    port = _closed_port()
    assert diagnose("127.0.0.1", port, "ubuntu", None) == (
        f"127.0.0.1 is on, but nothing listens on port {port}: is the port right (ssh_port in inventory/hosts.yml; "
        "SSH's usual port is 22), and is sshd running on the box?"
    )


def test_the_simulated_rig_not_started_says_start_it(tmp_path: Path) -> None:
    port = _closed_port()
    key = tmp_path / "rig_ed25519"
    key.write_text("x")
    assert diagnose("127.0.0.1", port, "rig", str(key), sandbox=True) == (
        f"the simulated rig is not started: sudo bin/rig sandbox up (nothing listens on 127.0.0.1:{port})"
    )
    assert diagnose("127.0.0.1", port, "rig", str(tmp_path / "none"), sandbox=True) == (
        f"the simulated rig is not started: sudo bin/rig sandbox up (its key {tmp_path / 'none'} is not there yet)"
    )


def _serve(handler, stop: threading.Event | None = None) -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def loop() -> None:  # one connection after another (the check's probe, then its login)
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                handler(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    if stop:
        stop.set()  # a handler still holding its connection lets go
    srv.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (a close alone does not, on Linux)
    srv.close()
    thread.join(5)


@pytest.fixture
def http_port() -> Iterator[int]:
    yield from _serve(lambda conn: conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"))


def test_a_port_that_is_no_ssh_server(http_port: int) -> None:
    assert diagnose("127.0.0.1", http_port, "ubuntu", None) == (
        f"127.0.0.1:{http_port} answers but is no SSH server (it said 'HTTP/1.1 400 Bad Request'): is ssh_port in "
        "inventory/hosts.yml the box's SSH port?"
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    done = threading.Event()
    yield from _serve(lambda conn: done.wait(3), stop=done)


def test_a_port_that_says_nothing(silent_port: int) -> None:
    line = diagnose("127.0.0.1", silent_port, "ubuntu", None, timeout=0.3)
    assert line == (
        f"127.0.0.1:{silent_port} answers but is no SSH server (it said nothing in 0.3 s): is ssh_port in "
        "inventory/hosts.yml the box's SSH port?"
    )


def test_a_name_dns_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(reach.socket, "getaddrinfo", unknown)
    assert diagnose("gpubox.lan", 22, "ubuntu", None) == (
        "gpubox.lan is no address this machine can find (Name or service not known): check ssh_hostname in "
        "inventory/hosts.yml, or give the box's IP address"
    )


def test_a_box_that_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(*args, **kwargs):
        raise TimeoutError("timed out")

    monkeypatch.setattr(reach.socket, "create_connection", silent)
    assert diagnose("192.168.1.50", 2222, "ubuntu", None) == (
        "no answer from 192.168.1.50:2222 in 5 s: is the box on and on this network, is the address right, or "
        "does a firewall drop port 2222?"
    )


class _OneKeyServer(paramiko.ServerInterface):
    def __init__(self, user: str, key: paramiko.PKey) -> None:
        self.user, self.key = user, key

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = username == self.user and key.get_fingerprint() == self.key.get_fingerprint()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("host", "authorised", "other"):
        paramiko.RSAKey.generate(1024).write_private_key_file(str(d / name))
        out[name] = d / name
    return out


def _ssh_server(keys: dict[str, Path]) -> Iterator[int]:
    def handler(conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        transport.add_server_key(paramiko.RSAKey.from_private_key_file(str(keys["host"])))
        authorised = paramiko.RSAKey.from_private_key_file(str(keys["authorised"]))
        try:
            transport.start_server(server=_OneKeyServer("owner", authorised))
            transport.join(10)
        except (paramiko.SSHException, EOFError):
            pass
        finally:
            transport.close()

    yield from _serve(handler)


@pytest.fixture
def ssh_port(keys: dict[str, Path]) -> Iterator[int]:
    yield from _ssh_server(keys)


def test_an_ssh_server_that_accepts_the_key(ssh_port: int, keys: dict[str, Path]) -> None:
    assert diagnose("127.0.0.1", ssh_port, "owner", str(keys["authorised"])) is None


def test_a_key_not_authorised_says_ssh_copy_id(ssh_port: int, keys: dict[str, Path]) -> None:
    other = keys["other"]
    assert diagnose("127.0.0.1", ssh_port, "owner", str(other)) == (
        f"owner@127.0.0.1 does not accept the key {other}: is ssh_user right? If it is, authorise the key once: "
        f"ssh-copy-id -i {other}.pub -p {ssh_port} owner@127.0.0.1"
    )


def test_a_wrong_user_says_the_same(ssh_port: int, keys: dict[str, Path]) -> None:
    line = diagnose("127.0.0.1", ssh_port, "ubuntu", str(keys["authorised"]))
    assert line is not None and line.startswith("ubuntu@127.0.0.1 does not accept the key") and "ssh-copy-id" in line


def test_a_public_key_never_reaches_paramiko(tmp_path: Path) -> None:
    assert diagnose("127.0.0.1", _closed_port(), "owner", "~/.ssh/id_ed25519.pub") == (
        "~/.ssh/id_ed25519.pub is the public key: give the private one (~/.ssh/id_ed25519): fix ssh_key in "
        "inventory/hosts.yml"
    )


def test_paramikos_other_exceptions_are_lines() -> None:
    args = ("192.168.1.50", 22, "ubuntu", "/k", False)
    assert login_problem(paramiko.PasswordRequiredException("x"), *args) == (
        "/k has a passphrase: give it as ssh_key_password in inventory/hosts.yml, or use a key without one"
    )
    assert login_problem(paramiko.SSHException("Error reading SSH protocol banner"), *args) == (
        "192.168.1.50:22 answers but is no SSH server: is ssh_port the box's SSH port?"
    )


def test_a_file_that_is_no_key(tmp_path: Path) -> None:
    garbage = tmp_path / "id_ed25519"
    garbage.write_text("not a key\n")
    with socket.create_server(("127.0.0.1", 0)) as srv:  # answers SSH's first line, then the key is read
        port = srv.getsockname()[1]
        threading.Thread(target=lambda: srv.accept()[0].sendall(b"SSH-2.0-OpenSSH_9.6\r\n"), daemon=True).start()
        line = diagnose("127.0.0.1", port, "owner", str(garbage))
    assert line is not None and line.startswith(f"{garbage} is no private key paramiko can read ("), line


@pytest.mark.parametrize(
    ("entry", "line"),
    [
        ({"ssh_hostname": "192.168.1.500"}, "hosts.yml: host box: ssh_hostname 192.168.1.500 is not an IP address: "
                                            "each of the four numbers is 0 to 255 (500 is not)"),
        ({"ssh_hostname": "h", "ssh_key": "~/.ssh/id_ed25519.pub"}, "hosts.yml: host box: ssh_key "
         "~/.ssh/id_ed25519.pub is the public key: give the private one (~/.ssh/id_ed25519)"),
    ],
)  # fmt: skip
def test_the_inventory_refuses_them_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry, line) -> None:
    """A hand-written hosts.yml: every run says it in one line (a .pub key was a 27-line traceback)."""
    from vllm_rig.inventory_file import InventoryError, load_groups

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yml").write_text(json.dumps({"hosts": {"box": entry}}))
    with pytest.raises(InventoryError) as err:
        load_groups(tmp_path / "hosts.yml", Path(__file__).resolve().parents[2] / "group_data")
    assert str(err.value) == line
