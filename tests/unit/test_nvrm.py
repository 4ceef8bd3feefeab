"""The NVIDIA kernel lines without an Xid number (vllm_rig/host/nvrm.py), on real kernel logs
(fixtures/tool_outputs/kernel-log/, each from a public report), named like the Xid events by the watchdog,
the driver stage and the boot-time guard."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.unit.test_day_two_host import KERNEL
from vllm_rig.host import nvrm
from vllm_rig.stages.driver.facts import REFUSAL_PATTERN
from vllm_rig.stages.driver.reboot import module_failure_reason

LOGS = Path(__file__).parent / "fixtures" / "tool_outputs" / "kernel-log"
GUARD = Path(__file__).resolve().parents[2] / "files" / "driver" / "vllm-rig-gpu-guard.sh"


def _log(name: str) -> str:
    return (LOGS / f"{name}.out").read_text()


def test_a_gpu_fallen_off_the_bus_without_an_xid_and_the_probe_failure() -> None:
    said = nvrm.describe(_log("nvsentinel-155_dmesg"))
    assert said == "GPU 0000:b3:00.0 has fallen off the bus (no Xid); the driver's probe failed for 1 GPU(s)"


def test_rminitadapter_failed_is_named_with_its_gpu_and_code() -> None:
    assert nvrm.describe(_log("open-gpu-kernel-modules-789_dmesg")) == (
        "RmInitAdapter failed on 0000:98:00.0 (0x62:0x65:1792): the driver could not initialize the GPU"
    )
    assert nvrm.describe(_log("gpu-operator-1146_syslog")) == (
        "RmInitAdapter failed on 0000:0a:00.0 (0x24:0x72:1568): the driver could not initialize the GPU x2"
    )
    assert nvrm.describe(_log("nvidia-forum-2009_dmesg")) == "the driver's probe failed for 1 GPU(s)"


def test_the_companion_of_an_xid_79_is_not_named_twice() -> None:
    said = nvrm.describe(KERNEL)
    assert said.startswith("Xid 79 on 0000:2b:00 (GPU has fallen off the bus); Xid 31 on 0000:08:00")
    assert "no Xid" not in said
    assert nvrm.describe("usb 2-3: reset high-speed USB device\nNVRM: loading NVIDIA UNIX x86_64 Kernel Module") == ""


def _journal(text: str) -> list[str]:
    """What the driver stage's ModuleFailure keeps: `journalctl -o cat | grep -E REFUSAL_PATTERN`, stripped
    (dmesg's time stamps and indentation off, as `-o cat` prints the message)."""
    lines = [line.split("] ", 1)[-1].strip() for line in text.splitlines()]
    run = subprocess.run(["grep", "-E", REFUSAL_PATTERN], input="\n".join(lines) + "\n", capture_output=True, text=True)
    return [line for line in run.stdout.splitlines() if line.strip()]


def test_the_driver_stage_names_them_instead_of_blaming_the_flavour() -> None:
    diag = {"kernel": "6.8.0-90-generic", "module_file": "/lib/modules/x/nvidia.ko", "dkms": [], "make_log": []}
    for name, said in (
        ("nvsentinel-155_dmesg", "GPU 0000:b3:00.0 has fallen off the bus (no Xid)"),
        ("open-gpu-kernel-modules-789_dmesg", "RmInitAdapter failed on 0000:98:00.0 (0x62:0x65:1792)"),
    ):
        reason = module_failure_reason({**diag, "journal": _journal(_log(name))}, "580.159.03")
        assert said in reason and "cold boot" in reason and "nvidia_driver_flavor" not in reason


def test_the_guard_greps_the_same_lines(tmp_path: Path) -> None:
    """The boot-time guard, run for real with one of two GPUs answering and the real kernel log as the
    journal: its last line names the kernel's words."""
    assert nvrm.GUARD_PATTERN in GUARD.read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "kernel.log").write_text(
        "\n".join(line.split("] ", 1)[-1].strip() for line in _log("open-gpu-kernel-modules-789_dmesg").splitlines())
    )
    stubs = {
        "nvidia-smi": "echo 'GPU 0: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-1)'",
        "journalctl": f"cat {tmp_path / 'kernel.log'}",
        "modinfo": "exit 0",
        "modprobe": "exit 0",
        "sleep": "exit 0",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GPU_COUNT": "2", "WAIT_S": "0"}
    run = subprocess.run(["sh", str(GUARD)], env={**os.environ, **env}, capture_output=True, text=True, timeout=30)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "vllm-rig-gpu-guard: 1 of 2 GPUs visible; the kernel says: NVRM: GPU 0000:98:00.0: RmInitAdapter failed! "
        "(0x62:0x65:1792); power the box off (a cold boot), reseat the cards and their power cables"
    )


def test_the_watchdog_names_a_gpu_lost_without_an_xid(tmp_path: Path, monkeypatch, capsys) -> None:
    from vllm_rig.host import watchdog

    class Run:
        def __init__(self, out: str) -> None:
            self.stdout, self.returncode = out, 0

    journal = "\n".join(line.split("] ", 1)[-1] for line in _log("nvsentinel-155_dmesg").splitlines())
    monkeypatch.setattr(watchdog.subprocess, "run", lambda cmd, **_: Run(journal if cmd[0] == "journalctl" else ""))
    args = ["--unit", "vllm.service", "--base-url", "http://127.0.0.1:9", "--model", "m"]
    watchdog.main([*args, "--result", str(tmp_path / "w.json"), "--state", str(tmp_path / "s.json")])
    out = capsys.readouterr().out
    assert "NVIDIA GPU events in the kernel log: GPU 0000:b3:00.0 has fallen off the bus (no Xid)" in out
