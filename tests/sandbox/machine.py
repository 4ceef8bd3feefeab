"""Sandbox machines: Debian 12 trees (rig3: one that identifies as Ubuntu 24.04) booted with systemd-nspawn,
reached over SSH on loopback.

A machine `rigN` lives in paths.ROOT/"machines"/rigN, shares the host's network namespace and runs
sshd on 127.0.0.1:(2220+N). A detached supervisor process runs systemd-nspawn in a loop so that a
reboot inside the machine (nspawn exits 133) boots it again, like a real box coming back.

No system bus is needed: nspawn runs with --register=no --keep-unit. Limits of a container: kernel
modules cannot be loaded inside, and `uname -r` is the host's kernel.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.sandbox import paths, rootfs

PORT_BASE = paths.SSH_PORT_BASE
REBOOT_EXIT = 133  # systemd-nspawn's exit status when the container asked to reboot
KEY_NAME = "rig_ed25519"
_NAME = re.compile(r"^rig([1-9][0-9]?)$")
# Which image a machine is made from; every machine not named here is Debian 12. rig3 is the Ubuntu 24.04
# machine (bookworm underneath; rootfs.py says why, tests/sandbox/README.md what differs from real noble).
OS_OF = {"rig3": rootfs.UBUNTU2404}


@dataclass(frozen=True)
class Machine:
    name: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"machine names are rig1..rig99, not {self.name!r}")

    @property
    def index(self) -> int:
        return int(self.name[3:])

    @property
    def port(self) -> int:
        return PORT_BASE + self.index

    @property
    def dir(self) -> Path:
        return paths.ROOT / "machines" / self.name

    @property
    def os(self) -> str:
        """rootfs.DEBIAN12 or rootfs.UBUNTU2404: the image the machine is made from."""
        return OS_OF.get(self.name, rootfs.DEBIAN12)

    def state(self, suffix: str) -> Path:
        return paths.STATE / f"machine-{self.name}.{suffix}"


def machines(count: int) -> list[Machine]:
    return [Machine(f"rig{i}") for i in range(1, count + 1)]


def key_path() -> Path:
    """The private key that logs in as `rig` on every machine; made on first use."""
    key = paths.KEYS / KEY_NAME
    if not key.exists():
        paths.KEYS.mkdir(parents=True, exist_ok=True)
        os.chmod(paths.KEYS, 0o700)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vllm-rig-sandbox", "-f", str(key)],
            check=True,
        )
    return key


# --- the machine's tree ---------------------------------------------------------------------------


def _ids(root: Path, user: str) -> tuple[int, int]:
    """uid/gid of a user as the machine's own /etc/passwd says (they need not match the host's)."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise KeyError(f"no user {user} in {root}/etc/passwd")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)


def _personalize(m: Machine, root: Path) -> None:
    """What differs per machine: name, machine-id, host keys. Done once, when the tree is made."""
    _write(root / "etc/hostname", f"{m.name}\n")
    _write(root / "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{m.name}\n::1\tlocalhost ip6-localhost\n")
    _write(root / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    # -f makes ssh-keygen -A write under the machine's root instead of the host's /etc/ssh.
    subprocess.run(["ssh-keygen", "-q", "-A", "-f", str(root)], check=True, stdout=subprocess.DEVNULL)


def _install_standins(m: Machine, root: Path) -> None:
    """The parts of a GPU box no package repo can give a container: the machine-side NVIDIA stand-ins
    (module loading at boot, /proc/driver and /sys/module views, mokutil). Installed with the real dpkg
    inside the tree, once, when the tree is made."""
    from tests.sandbox.fixtures import nvidia_repo

    debs = nvidia_repo.machine_debs()
    if m.os == rootfs.UBUNTU2404:
        debs += _ubuntu_kernel_debs()
    inbox = root / "var/cache/sandbox-standins"
    inbox.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        shutil.copy2(deb, inbox / deb.name)
    inside = [f"/var/cache/sandbox-standins/{deb.name}" for deb in debs]
    subprocess.run(
        [
            "systemd-nspawn",
            "--quiet",
            "--register=no",
            "--keep-unit",
            f"--machine={paths.host_wide_name(m.name)}-setup",
            f"--directory={root}",
            "dpkg",
            "-i",
            *inside,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _ubuntu_kernel_debs() -> list[Path]:
    """What an Ubuntu 24.04 server install has for its kernel: linux-generic, linux-image-generic (stand-ins
    built here, for the host's kernel release) and the headers they pull in (the ones the stand-in
    ubuntu2404 repo serves, so apt sees one version of each)."""
    from tests.sandbox.fixtures import nvidia_repo
    from tests.sandbox.fixtures.nvidia_repo import catalog, debs

    release = os.uname().release
    names = catalog.Ubuntu2404()
    out = paths.ROOT / "cache" / "ubuntu-kernel"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    image = catalog.kernel_image_packages(names, release)
    for deb in image:
        debs.build_deb(deb, out)
    served = nvidia_repo.repo_dir(rootfs.UBUNTU2404)
    headers = [served / d.filename for d in catalog.headers_packages(names, release)]
    return [*headers, *(out / d.filename for d in image)]


def _connect_config(m: Machine) -> None:
    """How the harness gets in: sshd's port and the authorized key. Re-applied on every `up`, so a
    regenerated key or a changed port never locks the harness out; the deploy does not own these."""
    root = m.dir
    sshd = (
        f"# vllm-rig sandbox: loopback only, keys only\nPort {m.port}\nListenAddress 127.0.0.1\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n"
    )
    _write(root / "etc/ssh/sshd_config.d/rig.conf", sshd)
    uid, gid = _ids(root, rootfs.RIG_USER)
    ssh_dir = root / "home" / rootfs.RIG_USER / ".ssh"
    auth = ssh_dir / "authorized_keys"
    _write(auth, Path(str(key_path()) + ".pub").read_text(), 0o600)
    for p in (ssh_dir, auth):
        os.chown(p, uid, gid)


def create(m: Machine, fresh: bool = False) -> bool:
    """Make the machine's tree from the image if it is missing (or `fresh`). True if it was made."""
    made = False
    if fresh and m.dir.exists():
        if is_running(m):
            raise RuntimeError(f"{m.name} is running; bring it down before recreating it")
        subprocess.run(["rm", "-rf", "--one-file-system", str(m.dir)], check=True)
    if not m.dir.exists():
        # Unpack and personalize under a temporary name, so an interrupted `up` leaves no half-made tree.
        tmp = m.dir.with_name(m.name + ".new")
        if tmp.exists():
            subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=True)
        rootfs.unpack(tmp, m.os)
        _personalize(m, tmp)
        _install_standins(m, tmp)
        tmp.rename(m.dir)
        made = True
    _connect_config(m)
    return made


# --- the supervisor -------------------------------------------------------------------------------


def nspawn_command(m: Machine) -> list[str]:
    return [
        "systemd-nspawn",
        "--boot",
        "--register=no",  # no machined, no system bus needed
        "--keep-unit",  # no transient scope either
        "--link-journal=no",  # leave the host's /var/log/journal alone
        "--kill-signal=SIGRTMIN+4",  # our SIGTERM to nspawn becomes an orderly poweroff inside
        f"--directory={m.dir}",
        f"--machine={paths.host_wide_name(m.name)}",
        f"--hostname={m.name}",
        # Fault knobs of the stand-ins that run inside (the fork's server and build), flipped by tests.
        f"--bind-ro={paths.KNOBS}:/etc/sandbox-knobs",
    ]


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def is_running(m: Machine) -> bool:
    """The supervisor holds an exclusive lock on its lock file for as long as it lives."""
    lock = m.state("lock")
    if not lock.exists():
        return False
    with lock.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def _cgroup_mounts() -> dict[str, Path]:
    """Where the hierarchies systemd uses are mounted: "" for cgroup2, "name=systemd" for the v1 one."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4]
        fstype, _source, options = line.split(" - ", 1)[1].split()[:3]
        if fstype == "cgroup2":
            found.setdefault("", Path(mount_point))
        elif fstype == "cgroup" and "name=systemd" in options.split(","):
            found.setdefault("name=systemd", Path(mount_point))
    return found


def _own_cgroup(m: Machine) -> None:
    """Move this process into a cgroup of its own, in every hierarchy systemd uses.

    With --keep-unit, nspawn puts the container in a "payload" cgroup beside itself. Without this,
    every machine would get the same host cgroups, and one machine's systemd stopping a unit would
    kill the same unit's processes in the other machines.
    """
    mounts = _cgroup_mounts()
    groups = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controllers not in mounts:
            continue
        group = mounts.pop(controllers) / path.lstrip("/") / paths.host_wide_name(m.name)
        try:
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
            groups.append(str(group))
        except OSError as e:
            print(f"supervisor: cannot use cgroup {group} ({e}); machines may share cgroups", flush=True)
    # `down` reads this to find every process of the machine if it has to pull the plug.
    m.state("cgroups").write_text("".join(g + "\n" for g in groups))


def _machine_pids(m: Machine) -> set[int]:
    """Every process in the machine's cgroups: supervisor, nspawn, and the container's own."""
    pids: set[int] = set()
    try:
        groups = m.state("cgroups").read_text().split()
    except OSError:
        return pids
    for group in groups:
        # os.walk skips a directory that vanishes while it walks (a stopping container removes its cgroups);
        # Path.rglob raised FileNotFoundError there.
        for directory, _subdirs, files in os.walk(group):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in Path(directory, "cgroup.procs").read_text().split()}
    return pids


def _kill_machine(m: Machine, timeout: float = 10) -> None:
    """Pull the plug: SIGKILL everything in the machine's cgroups (nspawn alone would orphan the
    container's init, which lives in its own pid namespace)."""
    deadline = time.monotonic() + timeout
    while (pids := _machine_pids(m) - {os.getpid()}) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def supervise(m: Machine) -> int:
    """Foreground loop: boot the machine; boot it again after an inside reboot; stop otherwise."""
    paths.STATE.mkdir(parents=True, exist_ok=True)
    lock = m.state("lock").open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"{m.name}: a supervisor is already running", flush=True)
        return 1
    m.state("pid").write_text(f"{os.getpid()}\n")
    _own_cgroup(m)
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # nspawn turns this into --kill-signal for PID 1

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    rc = 0
    try:
        boots = 0
        while not stopping:
            boots += 1
            m.state("boots").write_text(f"{boots}\n")
            print(f"supervisor: boot #{boots} of {m.name} at {time.strftime('%H:%M:%S')}", flush=True)
            child = subprocess.Popen(nspawn_command(m), stdin=subprocess.DEVNULL)
            m.state("nspawn.pid").write_text(f"{child.pid}\n")
            if stopping:  # the stop signal came before child existed
                child.send_signal(signal.SIGTERM)
            rc = child.wait()
            print(f"supervisor: systemd-nspawn exited {rc}", flush=True)
            if rc != REBOOT_EXIT:
                break
    finally:
        for suffix in ("pid", "nspawn.pid"):
            m.state(suffix).unlink(missing_ok=True)
    return 0 if rc in (0, REBOOT_EXIT) else rc


def _port_answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def start(m: Machine) -> bool:
    """Start the supervisor detached. False if it was already running."""
    if is_running(m):
        return False
    if _machine_pids(m):  # left over from a supervisor that was killed: never run two on one tree
        print(f"{m.name}: killing processes left over from an earlier run", flush=True)
        _kill_machine(m)
    if _port_answers(m.port):  # e.g. another checkout's rig: its sshd would answer our wait_ssh
        raise RuntimeError(f"{m.name}: 127.0.0.1:{m.port} is already taken by something else")
    paths.STATE.mkdir(parents=True, exist_ok=True)
    paths.KNOBS.mkdir(parents=True, exist_ok=True)  # bound into the machine at /etc/sandbox-knobs
    log = m.state("console.log").open("ab")
    # setsid -f: a new session, and the supervisor is re-parented away from us, so it outlives the
    # caller and never lingers as our zombie.
    cmd = ["setsid", "-f", sys.executable, "-m", "tests.sandbox.machine", "supervise", m.name]
    subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=paths.REPO, check=True)
    deadline = time.monotonic() + 10
    while not is_running(m):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{m.name}: supervisor did not start; see {m.state('console.log')}")
        time.sleep(0.05)
    return True


def down(m: Machine, timeout: float = 60) -> bool:
    """Power the machine off cleanly and stop its supervisor. False if it was not running."""
    if not is_running(m):
        if not _machine_pids(m):
            return False
        _kill_machine(m)  # a container whose supervisor died: nothing left to ask politely
        return True
    pid = _read_int(m.state("pid"))
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(m) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_running(m):  # the machine did not power off in time: pull the plug
        print(f"{m.name}: no clean poweroff within {timeout:.0f}s; killing it", flush=True)
        _kill_machine(m)
        while is_running(m):
            time.sleep(0.1)
    # The supervisor drops its lock as it exits; wait until it (and anything else) has left the cgroup.
    deadline = time.monotonic() + 5
    while _machine_pids(m) and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill_machine(m)
    return True


def destroy(m: Machine) -> None:
    """Power off, then delete the tree and the supervisor's state (the console log stays)."""
    down(m)
    if m.dir.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(m.dir)], check=True)
    for suffix in ("lock", "boots", "pid", "nspawn.pid", "cgroups"):
        m.state(suffix).unlink(missing_ok=True)


# --- talking to it --------------------------------------------------------------------------------

SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=5",
)


def ssh_command(m: Machine, *cmd: str) -> list[str]:
    user_host = f"{rootfs.RIG_USER}@127.0.0.1"
    return ["ssh", "-i", str(key_path()), "-p", str(m.port), *SSH_OPTIONS, user_host, *cmd]


def ssh(m: Machine, *cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command on the machine as `rig`; output captured as text."""
    return subprocess.run(ssh_command(m, *cmd), capture_output=True, text=True, check=check, timeout=timeout)


def wait_ssh(m: Machine, timeout: float = 60) -> float:
    """Poll until SSH logs in; return the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            if ssh(m, "true", check=False, timeout=10).returncode == 0:
                return time.monotonic() - t0
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{m.name}: no SSH on 127.0.0.1:{m.port} after {timeout:.0f}s")
        if not is_running(m):
            raise RuntimeError(f"{m.name}: not running; see {m.state('console.log')}")
        time.sleep(0.3)


def boot_id(m: Machine) -> str:
    return ssh(m, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()


def supervisor_pid(m: Machine) -> int | None:
    return _read_int(m.state("pid"))


def nspawn_pid(m: Machine) -> int | None:
    return _read_int(m.state("nspawn.pid"))


def boots(m: Machine) -> int:
    """How many times the current supervisor has booted the machine."""
    return _read_int(m.state("boots")) or 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "supervise":
        return supervise(Machine(argv[1]))
    print("usage: python -m tests.sandbox.machine supervise <name>  (internal; use python -m tests.sandbox)")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
