"""The deploy's facts read the sandbox's nvidia-smi and libnvidia-ml stand-ins with the same code that reads
the real ones.

The fact's own command runs (through sh, as pyinfra runs it, the host package on stdin) against the stand-ins
unpacked into a scratch root; its output goes through the fact's own process(), then through the preflight
verdict.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from tests.sandbox.fixtures.nvidia_repo import nvml_lib
from tests.sandbox.test_nvidia_repo import NEW, OLD, Machine, machine, repo  # noqa: F401 - fixtures
from tests.unit.groupdata import profile_data
from vllm_rig.stages.preflight import checks as preflight
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus, reader_stdin
from vllm_rig.validation import load_settings

SETTINGS = load_settings(profile_data())


def _fact(m: Machine) -> Any:
    """The fact's typed result (GpusResult) for the stand-ins; None would fail the test."""
    env = {**os.environ, "NVIDIA_STANDIN_ROOT": str(m.root), "PATH": f"{m.root}/usr/bin:{os.environ['PATH']}"}
    env["LD_LIBRARY_PATH"] = str(m.file(nvml_lib.LIB_DIR))
    fact, stdin = NvidiaGpus(), "".join(reader_stdin().readlines())
    run = subprocess.run(fact.command(), shell=True, env=env, input=stdin, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    result = fact.process(run.stdout.splitlines())
    assert result is not None
    return result


def _checks(m: Machine) -> dict[str, preflight.Check]:
    gpus = _fact(m)
    checks = preflight.check_driver_gpus(gpus, SETTINGS) + preflight.check_links(gpus, SETTINGS)
    return {c.name: c for c in checks}


def test_two_gpus_with_the_bridge(machine: Machine) -> None:  # noqa: F811
    gpus = _fact(machine)
    assert gpus["rc"] == 0 and [g["name"] for g in gpus["gpus"]] == ["NVIDIA GeForce RTX 2080 Ti"] * 2
    assert {(g["memory_mib"], g["compute_cap"]) for g in gpus["gpus"]} == {(22528, "7.5")}
    topo = gpus["links"]
    assert topo["topo"]["GPU0"]["GPU1"] == "NV2" and topo["p2p"]["GPU1"]["GPU0"] == "OK"
    assert topo["nvlink"][0] == [25.781, 25.781]
    checks = _checks(machine)
    assert all(c.status == "ok" for c in checks.values()), checks


def test_no_bridge_and_a_missing_gpu_are_reported(machine: Machine) -> None:  # noqa: F811
    machine.knobs(nvlink_bridge=False)
    checks = _checks(machine)
    assert checks["nvlink"].status == "warn" and "bridge" in checks["nvlink"].way_out
    machine.knobs(missing_gpus=[1])
    checks = _checks(machine)
    assert checks["gpus"].status == "fail" and "need 2" in checks["gpus"].detail


def test_version_mismatch_after_an_upgrade_means_reboot(machine: Machine) -> None:  # noqa: F811
    assert _fact(machine)["rc"] == 0  # loads the installed module in this boot
    # What apt does on upgrade: the old module is removed, the new one built; the loaded one stays.
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    for name in ("nvidia-smi", "nvidia-kernel-open-dkms"):
        machine.unpack(name, NEW)
    assert machine.dkms("install", "-m", "nvidia", "-v", NEW).returncode == 0
    gpus = _fact(machine)
    assert gpus["rc"] == 18 and "Driver/library version mismatch" in gpus["error"]
    [check] = preflight.check_driver_gpus(gpus, SETTINGS)
    assert check.status == "warn" and "reboot" in check.way_out
    machine.reboot()
    assert _fact(machine)["driver_version"] == NEW
