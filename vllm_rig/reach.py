"""Can this machine reach a box? The address, the port and the login, tried before pyinfra runs, each
failure said in one line with the next step (bin/rig check; bin/rig init's refusals use the same rules).

pyinfra's own lines for these ("No hosts remaining!", a paramiko traceback for a public key) say what broke
in its terms; an owner needs which of their own inputs is wrong. `diagnose` returns None when the box
answers SSH and accepts the key, else the line. paramiko is imported only for the login.
"""

from __future__ import annotations

import getpass
import logging
import re
import socket
from pathlib import Path
from typing import Any

TIMEOUT_S = 5.0
PUBLIC_KEY_START = ("ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")
_DOTTED = re.compile(r"^[0-9.]+$")


def address_problem(address: str) -> str | None:
    """What cannot be an SSH address whatever DNS says: a user@, commas for dots, a number over 255."""
    if "@" in address:
        user, _, host = address.rpartition("@")
        host = host or "the host alone"
        return f"{address} has a user in it: the address is {host}; the user ({user}) is given apart, as the SSH login"
    if "," in address:
        return f"{address} has commas: an IP address is written with dots, like {address.replace(',', '.')}"
    if _DOTTED.match(address):
        parts = address.split(".")
        if len(parts) != 4 or not all(parts):
            return f"{address} is not an IP address: four numbers with dots between, like 192.168.1.50"
        big = [p for p in parts if int(p) > 255]
        if big:
            return f"{address} is not an IP address: each of the four numbers is 0 to 255 ({big[0]} is not)"
    return None


def key_problem(key: str) -> str | None:
    """A public key given where the private one is wanted (by its name or by what the file holds)."""
    if key.endswith(".pub"):
        return f"{key} is the public key: give the private one ({key[: -len('.pub')]})"
    path = Path(key).expanduser()
    try:
        with path.open("rb") as fh:
            head = fh.read(64).decode("ascii", "replace")
    except OSError:
        return None
    if head.startswith(PUBLIC_KEY_START):
        return f"{key} holds a public key ({head.split()[0]}): give the private one, the file without .pub"
    return None


def _where(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def diagnose(
    address: str,
    port: int,
    user: str,
    key: str | None,
    *,
    password: str | None = None,
    sandbox: bool = False,
    timeout: float = TIMEOUT_S,
) -> str | None:
    """None when `user` logs in to address:port with `key` (no command runs), else one line with the next step.
    `sandbox`: the simulated rig on this machine, where a closed port means it is not started."""
    not_started = "the simulated rig is not started: sudo bin/rig sandbox up"
    problem = address_problem(address)
    if problem:
        return f"{problem}: fix ssh_hostname in inventory/hosts.yml"
    if key:
        problem = key_problem(key)
        if problem:
            return f"{problem}: fix ssh_key in inventory/hosts.yml"
        if not Path(key).expanduser().is_file():
            if sandbox:
                return f"{not_started} (its key {key} is not there yet)"
            return f"{key} is no file on this machine: point ssh_key at your private key"
    try:
        socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        return (
            f"{address} is no address this machine can find ({err.strerror}): check ssh_hostname "
            "in inventory/hosts.yml, or give the box's IP address"
        )
    where = _where(address, port)
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = _first_line(sock)
    except ConnectionRefusedError:
        if sandbox:
            return f"{not_started} (nothing listens on {where})"
        return (
            f"{address} is on, but nothing listens on port {port}: is the port right (ssh_port in "
            "inventory/hosts.yml; SSH's usual port is 22), and is sshd running on the box?"
        )
    except TimeoutError:
        return (
            f"no answer from {where} in {timeout:g} s: is the box on and on this network, is the address "
            f"right, or does a firewall drop port {port}?"
        )
    except OSError as err:
        return f"{where} cannot be reached ({err.strerror or err}): is the box on and on this network?"
    if not banner.startswith("SSH-"):
        said = f"it said {banner[:40]!r}" if banner else f"it said nothing in {timeout:g} s"
        return f"{where} answers but is no SSH server ({said}): is ssh_port in inventory/hosts.yml the box's SSH port?"
    return _login(address, port, user, key, password, timeout, sandbox)


def _first_line(sock: socket.socket) -> str:
    """The server's first line (an SSH server sends its version first); '' when it says nothing in time."""
    data = b""
    try:
        while b"\n" not in data and len(data) < 256:
            chunk = sock.recv(256)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data.decode("ascii", "replace").strip()


def _login(
    address: str, port: int, user: str, key: str | None, password: str | None, timeout: float, sandbox: bool
) -> str | None:
    import paramiko

    logging.getLogger("paramiko").addHandler(logging.NullHandler())  # its tracebacks become our one line
    client = paramiko.SSHClient()
    # Host keys are pyinfra's to check (ssh_known_hosts_file, ssh_strict_host_key_checking); this login is
    # only about the user and the key, and writes no known_hosts.
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        # The key loaded here, not by connect(): connect() tries every key type on the file and keeps the
        # last type's parse error, which hides a refused key.
        pkey = (
            paramiko.PKey.from_path(Path(key).expanduser(), passphrase=password.encode() if password else None)
            if key
            else None
        )
    except paramiko.PasswordRequiredException as err:
        return login_problem(err, address, port, user, key, sandbox)
    except Exception as err:  # noqa: BLE001 - whatever the parser says, the file is no key it can use
        return f"{key} is no private key paramiko can read ({err}): point ssh_key at your private key"
    try:
        client.connect(
            address,
            port=port,
            username=user,
            pkey=pkey,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=not key,
            look_for_keys=not key,
        )
    except Exception as err:  # noqa: BLE001 - each is mapped to its line; anything else is said as it is
        return login_problem(err, address, port, user, key, sandbox)
    finally:
        client.close()
    return None


def login_problem(err: BaseException, address: str, port: int, user: str, key: str | None, sandbox: bool) -> str:
    """paramiko's exception as the owner's next step."""
    import paramiko

    target = f"{user}@{address}"
    port_opt = f"-p {port} " if port != 22 else ""
    if isinstance(err, paramiko.PasswordRequiredException):
        return f"{key} has a passphrase: give it as ssh_key_password in inventory/hosts.yml, or use a key without one"
    if isinstance(err, paramiko.AuthenticationException):
        if sandbox:
            return f"the simulated rig refused its own key for {target}: sudo bin/rig sandbox down, then up again"
        which = f"the key {key}" if key else "any key of this machine (ssh-agent, ~/.ssh/id_*)"
        pub = f"{key}.pub" if key else "~/.ssh/id_ed25519.pub"
        return (
            f"{target} does not accept {which}: is ssh_user right? If it is, authorise the key once: "
            f"ssh-copy-id -i {pub} {port_opt}{target}"
        )
    if isinstance(err, paramiko.SSHException) and "banner" in str(err).lower():
        return f"{_where(address, port)} answers but is no SSH server: is ssh_port the box's SSH port?"
    if isinstance(err, TimeoutError | socket.timeout):
        return (
            f"{_where(address, port)} stopped answering during the login: is the box overloaded or the network flaky?"
        )
    return f"the SSH login as {target} failed: {type(err).__name__}: {err}"


def host_connection(name: str, data: dict[str, Any]) -> tuple[str, int, str, str | None, str | None]:
    """(address, port, user, key, key password) from a host's inventory data, with pyinfra's defaults (the
    host's name as its address, port 22, this machine's user)."""
    return (
        str(data.get("ssh_hostname") or name),
        int(data.get("ssh_port") or 22),
        str(data.get("ssh_user") or getpass.getuser()),
        str(data["ssh_key"]) if data.get("ssh_key") else None,
        data.get("ssh_key_password") or data.get("ssh_password"),
    )
