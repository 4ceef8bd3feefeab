"""pyinfra's SSH connections get TCP_NODELAY from our hook, and `ssh_tcp_nodelay: false` keeps it off.

The SSH server is paramiko's own server side on loopback: it completes a real handshake and key auth,
which is all a connection needs; pyinfra's real SSH connector does the connecting.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all

from vllm_rig.core import ssh_nodelay


class _AcceptAll(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED


@pytest.fixture(scope="module")
def ssh_server() -> Iterator[int]:
    host_key = paramiko.RSAKey.generate(2048)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transport.start_server(server=_AcceptAll())
            transports.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for transport in transports:
        transport.close()


def _connected_socket(port: int, key_file: Path, **data: object) -> socket.socket:
    inventory = Inventory(
        (
            ["127.0.0.1"],
            {
                "ssh_port": port,
                "ssh_user": "rig",
                "ssh_key": str(key_file),
                "ssh_known_hosts_file": "/dev/null",
                "ssh_strict_host_key_checking": "no",
                **data,
            },
        )
    )
    state = State(inventory, Config())
    connect_all(state)
    try:
        host = inventory.get_host("127.0.0.1")
        sock = host.connector.client.get_transport().sock
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        disconnect_all(state)


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "id_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(path))
    return path


def test_nodelay_is_set_on_the_ssh_socket(ssh_server: int, key_file: Path) -> None:
    ssh_nodelay.install()
    assert _connected_socket(ssh_server, key_file) != 0


def test_setting_turns_it_off(ssh_server: int, key_file: Path) -> None:
    ssh_nodelay.install()
    assert _connected_socket(ssh_server, key_file, ssh_tcp_nodelay=False) == 0


def test_install_is_idempotent() -> None:
    ssh_nodelay.install()
    wrapped = ssh_nodelay.SSHConnector._connect
    ssh_nodelay.install()
    assert ssh_nodelay.SSHConnector._connect is wrapped


def test_non_tcp_transport_is_left_alone() -> None:
    left, right = socket.socketpair()
    try:

        class _Transport:
            sock = left

        class _Client:
            def get_transport(self) -> _Transport:
                return _Transport()

        assert ssh_nodelay.set_nodelay(_Client()) is False
    finally:
        left.close()
        right.close()
