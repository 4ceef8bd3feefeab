"""A fact that cannot read one host's output fails that host with one line and the other host goes on: the
real pyinfra CLI against two sandbox machines, the fact on vllm_rig.core.facts' base
(tests/sandbox/deploys/fact_failure.py), rig2's value "[N/A]" (what nvidia-smi prints for a field it does not
have), while the run is planned and while it executes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.sandbox import machine, paths
from tests.sandbox.__main__ import up

pytestmark = pytest.mark.sandbox
DIR = "/tmp/vllm-rig-fact-test"


@pytest.fixture(scope="module")
def two_hosts(rig: Rig) -> Iterator[Rig]:
    had_rig2 = machine.is_running(machine.Machine("rig2"))
    up(2)
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    try:
        yield both
    finally:
        if not had_rig2:
            machine.down(machine.Machine("rig2"))


def _run(rig: Rig, phase: str, values: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict]:
    for name, value in values.items():
        rig.ssh(name, f"sudo rm -rf {DIR} && mkdir -p {DIR} && printf '%s\\n' '{value}' > {DIR}/planned")
    exe = Path(sys.executable).with_name("pyinfra")
    run = subprocess.run(
        [str(exe), "-y", "inventory/sandbox.py", "tests/sandbox/deploys/fact_failure.py", "--json"],
        cwd=paths.REPO,
        env={**os.environ, "VLLM_RIG_SANDBOX_MACHINES": "2", "VLLM_RIG_FACT_TEST_PHASE": phase},
        capture_output=True,
        text=True,
        timeout=300,
    )
    results = json.loads(run.stdout).get("results") or {} if run.stdout.strip() else {}
    return run, results


def _ran(rig: Rig, name: str) -> list[str]:
    return sorted(rig.ssh(name, f"ls {DIR} | sed -n 's/^ran-//p'").split())


def _fact_lines(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if "could not read" in line]


def test_a_fact_failing_while_planned_fails_only_that_host(two_hosts: Rig) -> None:
    run, results = _run(two_hosts, "plan", {"rig1": "7", "rig2": "[N/A]"})
    log = run.stdout + run.stderr
    assert run.returncode != 0 and results["failed_hosts"] == ["rig2"], log
    assert _fact_lines(run.stderr) == ["rig2: TestValue could not read value '[N/A]'"], run.stderr
    assert "Traceback" not in log
    assert _ran(two_hosts, "rig1") == ["last", "read"]
    assert two_hosts.ssh("rig1", f"cat {DIR}/planned-value").strip() == "7"
    assert _ran(two_hosts, "rig2") == []  # nothing planned after the read, nothing later either


def test_a_fact_failing_while_executing_fails_only_that_host(two_hosts: Rig) -> None:
    run, results = _run(two_hosts, "execute", {"rig1": "7", "rig2": "7"})
    log = run.stdout + run.stderr
    assert run.returncode != 0 and results["failed_hosts"] == ["rig2"], log
    assert _fact_lines(run.stderr) == ["rig2: TestValue could not read value '[N/A]'"], run.stderr
    assert "Traceback" not in log
    assert _ran(two_hosts, "rig1") == ["gated", "last", "read"]
    assert _ran(two_hosts, "rig2") == ["read"]  # the gated operation and every later one skipped it
