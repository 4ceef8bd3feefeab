"""Helpers for end-to-end scenarios: run the real deploy against the sandbox and read what it did."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import Rig
from tests.sandbox import machine, paths, services, snapshot
from tests.sandbox.fixtures import nvidia_repo
from vllm_rig import paths as rig_paths

_SAYS_FAILED = re.compile(r"fail|error|not allowed", re.IGNORECASE)
_PYINFRA_ERROR = re.compile(r"\[[^\]]+\] Error: ")  # pyinfra's line under the operation that failed a host
_PYINFRA = re.compile(r"\] (Connected|Ready: |Success|No changes|Skipped|Error: )")  # pyinfra's own host lines
_HEARTBEAT = re.compile(r": still running, \S+ so far$")  # vllm_rig/core/heartbeat.py: says nothing of why
_RUN_ENDED = re.compile(r"Deactivated successfully|Failed with result|^Stopped ")  # systemd's lines
SERVING = "serving"  # the snapshot label of a box after a whole deploy with the suite's default settings
STAGED = "host-stage"  # ... and of a fresh box after the host stage
HOST_STAGE = ("tasks/preflight.py", "tasks/driver.py", "tasks/cuda.py")  # what the runtime build needs first


@dataclass
class DeployRun:
    rc: int
    changed: list[str]  # operations that changed a host
    failed_hosts: list[str]
    log: str  # stderr: pyinfra's progress and our lines

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed_hosts

    def error_line(self) -> str:
        """The line that says why the run failed: ours in the failing operation (pyinfra marks that one with
        "[host] Error: ..."), preferring one that says failed; else any such line; else the log's last."""
        lines = [line.strip() for line in self.log.splitlines() if line.strip()]
        marker = next((i for i, line in enumerate(lines) if _PYINFRA_ERROR.match(line)), len(lines))
        op_start = max((i for i, line in enumerate(lines[:marker]) if line.startswith("--> ")), default=-1)
        ours = [
            line
            for line in lines[op_start + 1 : marker]
            if line.startswith("[") and not _PYINFRA.search(line) and not _HEARTBEAT.search(line)
        ]
        said = [line for line in ours if _SAYS_FAILED.search(line)]
        anywhere = [line for line in lines if _SAYS_FAILED.search(line)]
        return (said or ours[-1:] or anywhere or lines[-1:] or [f"pyinfra exited {self.rc}"])[0]


class DeployFailed(Exception):
    """A deploy a scenario needed did not succeed; str() is its one line."""

    def __init__(self, run: DeployRun) -> None:
        super().__init__(run.error_line())
        self.run = run


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


def serving(rig: Rig, name: str = "rig1") -> bool:
    """The machine already serves the model behind its LAN proxy (an earlier module's deploy on this slot): a
    module that only adds to a serving box may build on it instead of paying for a fresh machine and deploy."""
    # One unit per is-active: given several, it exits 0 when any one of them is active.
    active = "systemctl is-active -q vllm.service && systemctl is-active -q nginx.service"
    probe = f"{active} && test -f {rig_paths.NGINX_SITE} && echo serving"
    return rig.ssh(name, probe, check=False).strip() == "serving"


def serving_rig(rig: Rig, name: str = "rig1") -> Rig:
    """`name` serving the suite's default settings after a whole deploy, for a module that only adds to a serving
    box: put back from this slot's snapshot when an earlier module made one (tests/sandbox/snapshot.py), else a
    fresh machine and a whole deploy, kept for the next. The whole deploy from nothing is test_service_stage's."""
    if not snapshot.put_back(rig.machine(name), SERVING):
        fresh(rig, name)
        run = deploy(rig, "deploy.py", limit=name)
        assert run.ok, run.log[-4000:]
        keep_serving(rig, name)
    wait_serving(rig, name)
    return rig


def keep_serving(rig: Rig, name: str = "rig1") -> None:
    """Keep `name`, just deployed with the suite's default settings, for serving_rig (it boots again)."""
    snapshot.keep(rig.machine(name), SERVING)
    wait_serving(rig, name)


def forget_lan_ca(rig: Rig, name: str = "rig1") -> None:
    """Have the next deploy re-make the box's local CA, as an owner does it (lan_tls.py's REMAKE: remove ca.crt,
    deploy again): a kept box's CA may only sign the addresses it had when it was made, before a module's client
    network existed."""
    rig.ssh(name, "sudo rm -f /etc/vllm-rig/lan/ca.crt")


def wait_serving(rig: Rig, name: str = "rig1", timeout: float = 180) -> None:
    """Until `name` serves: after a boot the server starts and proves itself before systemd calls it active."""
    deadline = time.monotonic() + timeout
    while not serving(rig, name):
        assert time.monotonic() < deadline, f"{name} did not serve within {timeout:.0f} s of its boot"
        time.sleep(1)


def fresh(
    rig: Rig, name: str = "rig1", before_boot: Callable[[Path], None] | None = None, **knobs: object
) -> machine.Machine:
    """A machine as new (tree from the image), with NVIDIA stand-in knobs set before its first boot;
    `before_boot(tree)` lays more into the tree first (tests/sandbox/first_boot.py)."""
    m = rig.machine(name)
    machine.down(m)
    machine.create(m, fresh=True)
    if before_boot:
        before_boot(m.dir)
    if knobs:
        nvidia_repo.set_knobs(m.dir, **knobs)
    machine.start(m)
    machine.wait_ssh(m, timeout=120)
    return m


def staged(rig: Rig, *names: str) -> Rig:
    """Each of `names` (default: rig1) a fresh machine given the host stage (driver, CUDA) with the suite's
    default settings, booted again: put back from this slot's snapshot (tests/sandbox/snapshot.py) when an
    earlier module kept one, else made (one host-stage run for all that lack one) and kept."""
    names = names or ("rig1",)
    missing = [name for name in names if not snapshot.put_back(rig.machine(name), STAGED)]
    for name in missing:
        fresh(rig, name)
    for limit in [None] if len(missing) == len(rig.machines) else missing:  # one run where it can be
        run = deploy(rig, *HOST_STAGE, limit=limit)
        assert run.ok, run.log[-4000:]
    for name in missing:
        snapshot.keep(rig.machine(name), STAGED)
    return rig


def two_fresh_hosts(rig: Rig) -> Rig:
    """rig1 and rig2 new machines given the host stage (staged): where scenarios of two hosts of one
    fingerprint start. The caller has brought rig2 up (`up(2)`) and takes it down at the end."""
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    return staged(both, "rig1", "rig2")


def sandbox_rig(count: int = 1) -> Rig:
    """The running sandbox as the `rig` fixture hands it to tests, for scripts outside pytest (benchmarks/).
    SystemExit with one line when it is not up. The inventory then lists rig1..rigN only, whatever else runs."""
    ms = machine.machines(count)
    down = [m.name for m in ms if not machine.is_running(m)]
    down += [name for name, state in services.status() if state.startswith("stopped")]
    if down:
        raise SystemExit(f"the sandbox is not up ({', '.join(down)}): run `python -m tests.sandbox up` first")
    os.environ["VLLM_RIG_SANDBOX_MACHINES"] = str(count)
    inventory = paths.REPO / "inventory" / "sandbox.py"
    return Rig(ms, inventory, machine.key_path(), paths.fileserver_url(), started=[])


def unit_span(rig: Rig, unit: str, since: float, name: str = "rig1") -> tuple[float, float]:
    """(start, end) in epoch seconds of the first run of `unit` (a glob works) that began at or after `since`,
    from systemd's own journal lines about it: what the host recorded, not what the control side assumed."""
    out = rig.ssh(name, f"sudo journalctl --no-pager -o json --since=@{int(since)} -u '{unit}'")
    start = None
    for entry in map(json.loads, out.splitlines()):
        at, message = int(entry["__REALTIME_TIMESTAMP"]) / 1e6, str(entry.get("MESSAGE", ""))
        if entry.get("SYSLOG_IDENTIFIER") != "systemd" or at < since:
            continue  # the unit's own output, or an earlier run
        if start is None and message.startswith("Started "):
            start = at
        elif start is not None and ("Deactivated successfully" in message or "Failed with result" in message):
            return start, at
    raise LookupError(f"no run of {unit} that started after {since:.0f} and ended, in {name}'s journal")


def unit_spans(rig: Rig, unit: str, since: float, name: str = "rig1") -> list[tuple[float, float]]:
    """Every run of `unit` that began at or after `since` and ended, (start, end) in epoch seconds, across
    reboots (the journal is persistent): a run ends when systemd says it deactivated, failed or stopped it."""
    out = rig.ssh(name, f"sudo journalctl --no-pager -o json --since=@{int(since)} -u '{unit}'")
    runs, start = [], None
    for entry in map(json.loads, out.splitlines()):
        at, message = int(entry["__REALTIME_TIMESTAMP"]) / 1e6, str(entry.get("MESSAGE", ""))
        if entry.get("SYSLOG_IDENTIFIER") != "systemd" or at < since:
            continue
        if start is None and message.startswith("Started "):
            start = at
        elif start is not None and _RUN_ENDED.search(message):
            runs.append((start, at))
            start = None
    if not runs:
        raise LookupError(f"no run of {unit} that started after {since:.0f} and ended, in {name}'s journal")
    return runs


def set_knobs_and_reboot(rig: Rig, m: machine.Machine, **knobs: object) -> None:
    nvidia_repo.set_knobs(m.dir, **knobs)
    before = machine.boot_id(m)
    machine.ssh(m, "sudo systemctl reboot", check=False)
    wait_new_boot(m, before)


def wait_new_boot(m: machine.Machine, before: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            if machine.boot_id(m) != before:
                return
        except subprocess.SubprocessError:
            continue
    raise TimeoutError(f"{m.name} did not come back with a new boot id")
