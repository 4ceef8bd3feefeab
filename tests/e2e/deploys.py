"""Helpers for end-to-end scenarios: run the real deploy against the sandbox and read what it did."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from tests.conftest import Rig
from tests.sandbox import machine
from tests.sandbox.fixtures import nvidia_repo


@dataclass
class DeployRun:
    rc: int
    changed: list[str]  # operations that changed a host
    failed_hosts: list[str]
    log: str  # stderr: pyinfra's progress and our lines

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed_hosts


def deploy(
    rig: Rig, *files: str, data: dict[str, object] | None = None, limit: str | None = None, timeout: float = 900
) -> DeployRun:
    """`pyinfra -y inventory/sandbox.py FILES --json [--limit HOST] --data K=V ...`, parsed."""
    args = [*files, "--json", *(["--limit", limit] if limit else [])]
    for key, value in (data or {}).items():
        args += ["--data", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    run: subprocess.CompletedProcess[str] = rig.pyinfra(*args, timeout=timeout)
    results = {}
    if run.stdout.strip():
        results = json.loads(run.stdout).get("results") or {}
    changed = [op["name"] for op in results.get("operations", []) if op.get("success")]
    return DeployRun(run.returncode, changed, results.get("failed_hosts", []), run.stderr)


def fresh(rig: Rig, name: str = "rig1", **knobs: object) -> machine.Machine:
    """A machine as new (tree from the image), with NVIDIA stand-in knobs set before its first boot."""
    m = rig.machine(name)
    machine.down(m)
    machine.create(m, fresh=True)
    if knobs:
        nvidia_repo.set_knobs(m.dir, **knobs)
    machine.start(m)
    machine.wait_ssh(m, timeout=120)
    return m


def set_knobs_and_reboot(rig: Rig, m: machine.Machine, **knobs: object) -> None:
    nvidia_repo.set_knobs(m.dir, **knobs)
    before = machine.boot_id(m)
    machine.ssh(m, "sudo systemctl reboot", check=False)
    wait_new_boot(m, before)


def wait_new_boot(m: machine.Machine, before: str, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            if machine.boot_id(m) != before:
                return
        except subprocess.SubprocessError:
            continue
    raise TimeoutError(f"{m.name} did not come back with a new boot id")
