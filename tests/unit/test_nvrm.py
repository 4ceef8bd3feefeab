"""The NVIDIA kernel lines without an Xid number (vllm_rig/host/nvrm.py), on real kernel logs
(fixtures/tool_outputs/kernel-log/, each from a public report), named like the Xid events by the watchdog,
the driver stage and the boot-time guard."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

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


# ---- issue 36: why the module brought no GPU up, one class at a time, on every real sample ----------------
def _cat(text: str) -> list[str]:
    """A sample as `journalctl -o cat` then the driver stage's grep would give it: the NVRM lines' prefixes
    cut (nvrm.normal), a dmesg stamp or a journal line's "... kernel: " cut from the others."""
    lines = [
        re.sub(r"^(?:.*?\bkernel: )?(?:\[[^\]]*\] )?", "", line).strip() for line in nvrm.normal(text).splitlines()
    ]
    run = subprocess.run(["grep", "-E", REFUSAL_PATTERN], input="\n".join(lines) + "\n", capture_output=True, text=True)
    return [line for line in run.stdout.splitlines() if line.strip()]


_DIAG = {"kernel": "6.8.0-90-generic", "module_file": "/lib/modules/x/nvidia.ko", "dkms": [], "make_log": []}


def _reasons(name: str) -> list[str]:
    """The driver stage's line from the grepped journal and from the raw sample (any prefix, any date)."""
    raw = [line for line in _log(name).splitlines() if line.strip()]
    return [module_failure_reason({**_DIAG, "journal": lines}, "580.159.03") for lines in (_cat(_log(name)), raw)]


def test_the_taint_line_is_not_a_refusal_and_does_not_hide_the_cause_after_it() -> None:
    for reason in _reasons("open-gpu-kernel-modules-587_dmesg") + _reasons("open-gpu-kernel-modules-344_dmesg"):
        assert "Secure Boot" not in reason and "enroll" not in reason
    # A module that loaded: its taint line alone says nothing is wrong with the signature.
    for reason in _reasons("k8s-device-plugin-480_dmesg"):
        assert "Secure Boot" not in reason and reason.endswith("grep -i -e nvidia -e NVRM")


def test_a_gpu_without_gsp_asks_for_the_proprietary_flavour_quoting_the_kernel() -> None:
    for name, gpu in (
        ("open-gpu-kernel-modules-587_dmesg", "0000:01:00.0 (PCI ID: 10de:2331)"),
        ("negativo17-nvidia-driver-158_journal", "0000:09:00.0 (PCI ID: 10de:1d01)"),
    ):
        for reason in _reasons(name):
            assert reason.startswith("the open kernel module does not support this GPU (NVRM: The NVIDIA GPU " + gpu)
            assert "does not include the required GPU System Processor" in reason
            assert "set nvidia_driver_flavor=proprietary" in reason
        assert f"GPU {gpu.split()[0]} (PCI ID {gpu.split()[-1][:-1]}) has no GSP" in nvrm.describe(_log(name))


def test_a_gpu_the_release_does_not_support_is_named_with_the_release() -> None:
    for name, release, gpu in (
        ("open-gpu-kernel-modules-393_dmesg", "520.56.06", "0000:01:00.0"),
        ("siderolabs-extensions-227_kmsg", "535.54.03", "0000:00:10.0"),
    ):
        for reason in _reasons(name):
            assert f"NVRM: The NVIDIA GPU {gpu}" in reason
            assert f"is not supported by the NVIDIA {release} driver release" in reason
            assert "nvidia_driver_version" in reason and "Secure Boot" not in reason and "reseat" not in reason
        assert f"is not supported by the NVIDIA {release} release" in nvrm.describe(_log(name))


@pytest.mark.parametrize(
    "name",
    [
        "rtl88x2bu-114_dmesg",
        "gtp5g-116_journal",
        "displaylink-debian-523_journal",
        "droidcam-21_syslog",
        "opensuse-sdb-nvidia_dmesg",
    ],
)
def test_the_real_secure_boot_refusals_under_any_date_and_locale(name: str) -> None:
    for reason in _reasons(name):
        assert reason.startswith("the kernel refused the module under Secure Boot (Lockdown: ")
        assert "is restricted" in reason and "enroll the key dkms signs with" in reason


def test_lockdown_quotes_modprobe_whatever_its_language() -> None:
    for errno in ("Operation not permitted", "Vorgang nicht zulässig", "Required key not available"):
        journal = [
            "Dez 06 07:46:29 box kernel: Lockdown: modprobe: unsigned module loading is restricted; "
            "see man kernel_lockdown.7",
            f"2026-12-06T07:46:29+0100 box sh[412]: modprobe: ERROR: could not insert 'nvidia': {errno}",
        ]
        reason = module_failure_reason({**_DIAG, "journal": journal}, "580.159.03")
        assert f"see man kernel_lockdown.7; could not insert 'nvidia': {errno})" in reason


def test_modprobe_refused_without_a_kernel_line_is_not_guessed_into_secure_boot() -> None:
    """bottlerocket's report kept only modprobe's EPERM: without the kernel's lockdown line it could be
    anything (a container without CAP_SYS_MODULE); the stage sends the owner to the journal."""
    for reason in _reasons("bottlerocket-4218_console"):
        assert "Secure Boot" not in reason


def test_a_bar_the_firmware_left_unassigned_sends_the_owner_to_the_firmware() -> None:
    for name, bar in (
        ("firmware-open-66_dmesg", "BAR0 is 0M @ 0x0 (PCI:0000:06:00.0)"),
        ("mbp-2016-linux-60_dmesg", "BAR1 is 0M @ 0x0 (PCI:0000:0a:00.0)"),
        ("open-gpu-kernel-modules-344_dmesg", "BAR2 is 0M @ 0x0 (PCI:0000:00:05.0)"),
    ):
        for reason in _reasons(name):
            assert f"(NVRM: This PCI I/O region assigned to your NVIDIA device is invalid: {bar})" in reason
            assert "Above 4G decoding" in reason and "update the BIOS" in reason and "pci=realloc" in reason
            assert "reseat" not in reason and "Secure Boot" not in reason
    assert "BAR0 of 0000:06:00.0 is 0M @ 0x0: the firmware left it unassigned" in nvrm.describe(
        _log("firmware-open-66_dmesg")
    )


def test_missing_power_cables_are_named_and_quoted() -> None:
    for name, gpu in (("code-search-p40_dmesg", "0000:13:00.0"), ("code-search-m40_journal", "0000:01:00.0")):
        for reason in _reasons(name):
            assert reason.startswith(
                f"a GPU has no power from its PCIe cables (NVRM: GPU {gpu}: GPU does not have the necessary power "
                "cables connected)"
            )
            assert "8-pin PCIe power cables" in reason


def test_an_xid_in_the_same_log_is_named_instead_of_no_xid() -> None:
    journal = [
        "NVRM: Xid (PCI:0000:2b:00): 79, pid=1234, GPU has fallen off the bus.",
        "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        "NVRM: GPU 0000:13:00.0: GPU does not have the necessary power cables connected.",
    ]
    grepped = _cat("\n".join(journal))
    assert grepped == journal  # the stage's grep keeps the Xid line
    reason = module_failure_reason({**_DIAG, "journal": grepped}, "580.159.03")
    assert "(the kernel also logged Xid 79 on 0000:2b:00 (GPU has fallen off the bus))" in reason
    generic = module_failure_reason({**_DIAG, "journal": grepped[:2]}, "580.159.03")
    assert "Xid 79 on 0000:2b:00 (GPU has fallen off the bus)" in generic and "no Xid" not in generic
