"""Fixture registry: build each fixture's content and keep its server (if any) running.

A fixture is a module tests.sandbox.fixtures.<name> with an idempotent `build()`. If it also has a
module-level `PORT` int, it is a server: `python -m tests.sandbox.fixtures.<name> serve --port PORT
--root <.sandbox>` runs it in the foreground, and this module runs that detached, with a pid file
and a log under paths.STATE.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tests.sandbox import paths

# Order matters: content builders first, so servers start on built content.
FIXTURES: list[str] = ["nvidia_repo", "pkg_index", "forge", "hf_mirror", "fileserver", "artifact_store"]
PACKAGE = "tests.sandbox.fixtures"


@dataclass
class Outcome:
    name: str
    action: str  # "started", "running", "built", "missing"
    seconds: float = 0.0
    port: int | None = None


def pid_file(name: str) -> Path:
    return paths.STATE / f"service-{name}.pid"


def log_file(name: str) -> Path:
    return paths.STATE / f"service-{name}.log"


def load(name: str) -> ModuleType | None:
    """Import a fixture module, or None if it does not exist (yet)."""
    module = f"{PACKAGE}.{name}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:  # the module exists but something it imports does not: a real error
            raise
        return None


def port_of(mod: ModuleType) -> int | None:
    port = getattr(mod, "PORT", None)
    return port if isinstance(port, int) else None


def port_answers(port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=timeout):
        return True
    return False


def _read_pid(name: str) -> int | None:
    try:
        return int(pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None


def _ours(pid: int, name: str) -> bool:
    """Alive, not a zombie, and still our fixture (a recycled pid would run something else)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and f"{PACKAGE}.{name}".encode() in cmdline


def is_running(name: str, port: int) -> bool:
    pid = _read_pid(name)
    return pid is not None and _ours(pid, name) and port_answers(port)


def build(mod: ModuleType) -> None:
    fn = getattr(mod, "build", None)
    if fn is None:
        return
    # The interface is build(); tolerate the older build(root) spelling.
    if any(p.default is inspect.Parameter.empty for p in inspect.signature(fn).parameters.values()):
        fn(paths.ROOT)
    else:
        fn()


class PortTaken(RuntimeError):
    """A fixture's port answers, but not from our fixture: the message is one line with the fix."""


def start(name: str, port: int, timeout: float = 90) -> None:
    """Run the fixture's server detached (new session, re-parented away from us) and wait for its port."""
    if port_answers(port):
        raise PortTaken(
            f"{name}: port {port} is taken by something that is not our fixture: stop it, or move the simulated "
            "rig's ports with VLLM_RIG_SANDBOX_SLOT=1 (2, 3, ...)"
        )
    paths.STATE.mkdir(parents=True, exist_ok=True)
    pid_file(name).unlink(missing_ok=True)
    module = f"{PACKAGE}.{name}"
    serve = [sys.executable, "-m", module, "serve", "--port", str(port), "--root", str(paths.ROOT)]
    # sh writes its own pid, then execs the server in place, so the pid file names the server.
    cmd = ["setsid", "-f", "sh", "-c", f'echo $$ > "{pid_file(name)}"; exec "$@"', "sh", *serve]
    with log_file(name).open("ab") as log:
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=paths.REPO, check=True)
    deadline = time.monotonic() + timeout
    while not port_answers(port):
        pid = _read_pid(name)
        if time.monotonic() > deadline or (pid is not None and not _ours(pid, name)):
            tail = log_file(name).read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name}: server did not come up on port {port}; log tail:\n{tail}")
        time.sleep(0.1)


def stop(name: str, timeout: float = 10) -> bool:
    """Stop a fixture's server. False if it was not running."""
    pid = _read_pid(name)
    if pid is None or not _ours(pid, name):
        pid_file(name).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _ours(pid, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _ours(pid, name):
        os.kill(pid, signal.SIGKILL)
    pid_file(name).unlink(missing_ok=True)
    return True


def spawn(cmd: list[str]) -> subprocess.Popen:
    """One of a fixture's programs, in its own session (so supervise() can stop its whole process group)."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)


def supervise(children: list[tuple[subprocess.Popen, int]]) -> int:
    """Wait on a fixture's programs (each started in its own session, with its graceful stop signal: nginx's is
    SIGQUIT) until one exits, then stop the rest. SIGTERM (stop() above) and SIGINT stop them all. The signal goes
    to each one's process group: fcgiwrap's parent leaves its preforked children running when it is stopped."""

    def stop_all(_sig: int = 0, _frame: object = None) -> None:
        for child, sig in children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    while all(child.poll() is None for child, _ in children):
        time.sleep(0.2)
    stop_all()
    return max(child.wait() for child, _ in children)


def up_one(name: str) -> Outcome:
    t0 = time.monotonic()
    mod = load(name)
    if mod is None:
        print(f"services: {name}: no module {PACKAGE}.{name} yet, skipped", flush=True)
        return Outcome(name, "missing")
    build(mod)
    port = port_of(mod)
    if port is None:
        return Outcome(name, "built", time.monotonic() - t0)
    if is_running(name, port):
        return Outcome(name, "running", time.monotonic() - t0, port)
    stop(name)  # a live process that does not answer: replace it
    start(name, port)
    return Outcome(name, "started", time.monotonic() - t0, port)


def up() -> list[Outcome]:
    return [up_one(name) for name in FIXTURES]


def down() -> list[str]:
    """Stop every fixture server we have a pid file for, registered or not. Returns those stopped."""
    names = {p.name[len("service-") : -len(".pid")] for p in paths.STATE.glob("service-*.pid")}
    return [name for name in sorted(names | set(FIXTURES)) if stop(name)]


def status() -> list[tuple[str, str]]:
    rows = []
    for name in FIXTURES:
        mod = load(name)
        if mod is None:
            rows.append((name, "missing"))
            continue
        port = port_of(mod)
        if port is None:
            rows.append((name, "static (no server)"))
        else:
            state = "running" if is_running(name, port) else "stopped"
            rows.append((name, f"{state} on 127.0.0.1:{port}"))
    return rows
