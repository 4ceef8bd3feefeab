"""TCP_NODELAY on pyinfra's SSH connections.

Paramiko leaves Nagle's algorithm on. Each remote command is a few small packets each way, and Nagle plus
the peer's delayed ACK stalls every exchange by ~40 ms: on a no-op re-run that stall is almost all of the
time. Measured with pyinfra 3.10.0 and paramiko 4.0.0 (whose source never sets TCP_NODELAY) against a Debian
12 host on loopback: 100 no-op operations took 9.9 s stock and 1.5 s with NODELAY; a raw paramiko exec of
`true` 46 ms, and 2.7 ms with NODELAY (benchmarks/noop.py measures it on the sandbox). The hook wraps
pyinfra's SSH connector once per process, from config.py (which pyinfra loads before connecting) and from
our inventories. Host data `ssh_tcp_nodelay: false` opts out.
"""

from __future__ import annotations

import socket
from typing import Any

from pyinfra.connectors.ssh import SSHConnector

_INSTALLED_MARK = "_vllm_rig_nodelay"


def install() -> None:
    """Wrap SSHConnector._connect so each new connection gets TCP_NODELAY. Idempotent."""
    if getattr(SSHConnector._connect, _INSTALLED_MARK, False):
        return
    original = SSHConnector._connect

    def _connect(self: SSHConnector) -> None:
        original(self)
        if self.host.data.get("ssh_tcp_nodelay", True):
            set_nodelay(self.client)

    setattr(_connect, _INSTALLED_MARK, True)
    SSHConnector._connect = _connect  # type: ignore[method-assign]


def set_nodelay(client: Any) -> bool:
    """Set TCP_NODELAY on a connected paramiko client's socket; False when it is not a TCP socket
    (a ProxyCommand pipe, say), where there is nothing to set."""
    transport = client.get_transport() if client is not None else None
    sock = getattr(transport, "sock", None)
    if not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return True
