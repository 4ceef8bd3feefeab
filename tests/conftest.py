"""pytest wiring for the sandbox rig (used by tests/sandbox and tests/e2e): the `sandbox` marker and the
session-scoped `rig` fixture."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandbox import machine, paths

# The scenarios were written for the fork kind's compile path (arch list, MAX_JOBS, ccache, artifacts of a
# compile); the default kind, upstream, has its own scenario (tests/e2e/test_upstream_kind.py, by host data).
# Every pyinfra run of the suite inherits this; inventory/sandbox.py reads it.
os.environ.setdefault("VLLM_RIG_SANDBOX_RUNTIME_KIND", "fork")


@dataclass
class Rig:
    """Connection info for the running sandbox."""

    machines: list[machine.Machine]
    inventory: Path
    key: Path
    fileserver: str  # base URL of the static file server
    started: list[str]  # what the session's `up` had to start (empty if everything was already up)

    def machine(self, name: str = "rig1") -> machine.Machine:
        return next(m for m in self.machines if m.name == name)

    def ssh(self, name: str, command: str, check: bool = True, timeout: float = 120) -> str:
        return machine.ssh(self.machine(name), command, check=check, timeout=timeout).stdout

    def pyinfra(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run the real pyinfra CLI against the sandbox inventory, from the repo root."""
        exe = Path(sys.executable).with_name("pyinfra")
        cmd = [str(exe), "-y", str(self.inventory.relative_to(paths.REPO)), *args]
        return subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True, timeout=timeout)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sandbox-machines",
        type=int,
        default=int(os.environ.get("VLLM_RIG_SANDBOX_MACHINES") or 1),
        help="how many sandbox machines (rig1..rigN) the `rig` fixture brings up",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sandbox: needs the sandbox rig (root, systemd-nspawn, debootstrap)")


_TOOLS = ("systemd-nspawn", "debootstrap", "ssh", "ssh-keygen", "zstd", "setsid")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the sandbox rig needs root"
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    return f"the sandbox rig needs {', '.join(missing)}" if missing else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Anything that uses `rig` is a sandbox test, marked or not; skip those where the rig cannot run.
    reason = _why_not()
    for item in items:
        if "rig" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sandbox)
        if reason and item.get_closest_marker("sandbox"):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    """Bring the sandbox up once per session (idempotent) and leave it running afterwards, so the next
    session starts in seconds; `python -m tests.sandbox down` stops it."""
    from tests.sandbox.__main__ import up

    # The option exists only when this conftest loaded early (pytest tests/sandbox); else use the env.
    count = request.config.getoption("--sandbox-machines", default=None)
    result = up(count or int(os.environ.get("VLLM_RIG_SANDBOX_MACHINES") or 1))
    yield Rig(
        machines=result.machines,
        inventory=paths.REPO / "inventory" / "sandbox.py",
        key=machine.key_path(),
        fileserver=paths.fileserver_url(),
        started=result.started,
    )
