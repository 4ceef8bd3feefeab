"""The day-two host programs' own logic: the GPU wait's reading of nvidia-smi, the watchdog's Xid names and
bounds, the start check's KV cache verdict. The programs run against the stand-in server and the sandbox's
systemd in tests/e2e/test_day_two.py; here each rule gets the inputs that make it pass and fail."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.unit.gpu_xml import cards_xml, real_xml
from tests.unit.groupdata import profile_data
from vllm_rig.host import gpu_wait, nvrm, start_check, watchdog
from vllm_rig.paths import Layout
from vllm_rig.stages.service.unit import gpu_wait_command, kv_key
from vllm_rig.validation import load_settings

OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"
BUS0, BUS1, BUS2 = "00000000:01:00.0", "00000000:02:00.0", "00000000:03:00.0"
WORKER = {"pid": 4242, "name": "python3 worker.py", "used_mib": 20480, "type": "C"}
# The processes of two real tables, as XML carries them: desktop-postgres/nvidia-smi_plain (a desktop's Xorg and
# gnome-shell beside a CUDA PostgreSQL backend) and nvitop-152/nvidia-smi_processes (GPU 2: an X server and
# gnome-shell; GPU 0: a compute process and a graphics one).
XORG = {"pid": 1229, "name": "/usr/lib/xorg/Xorg", "used_mib": 36, "type": "G"}
SHELL = {"pid": 1475, "name": "/usr/bin/gnome-shell", "used_mib": 9, "type": "G"}
POSTGRES = {"pid": 159183, "name": "postgres: user db 127.0.0.1(60178) idle", "used_mib": 109, "type": "C"}
X = {"pid": 18243, "name": "/usr/bin/X", "used_mib": 64, "type": "G"}
SHELL2 = {"pid": 22720, "name": "/usr/bin/gnome-shell", "used_mib": 34, "type": "G"}
FOO = {"pid": 10734, "name": "foo_bar", "used_mib": 160, "type": "C"}
BAZ = {"pid": 58661, "name": "bazbaz", "used_mib": 3, "type": "G"}
NVITOP = ((BUS0, 170, [FOO, BAZ]), (BUS1, 170, []), (BUS2, 98, [X, SHELL2]))


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xml: str, rc: int = 0) -> None:
    """An nvidia-smi that answers `-q -x` with this XML (and exit code), and nothing else."""
    (tmp_path / "q.xml").write_text(xml)
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] || exit 2\ncat {tmp_path}/q.xml\nexit {rc}\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_free_gpus_start_at_once(tmp_path, monkeypatch, capsys) -> None:
    fake_smi(tmp_path, monkeypatch, cards_xml((BUS0, 1, []), (BUS1, 3, [])))
    assert gpu_wait.main(["--devices", "0,1", "--timeout", "0"]) == 0


def test_a_compute_process_is_named_with_its_card(tmp_path, monkeypatch, capsys) -> None:
    fake_smi(tmp_path, monkeypatch, cards_xml((BUS0, 1, []), (BUS1, 20483, [WORKER])))
    assert gpu_wait.main(["--devices", "0,1", "--timeout", "0"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and f"GPU 1 ({BUS1}) is held by pid 4242 python3 worker.py (compute, 20480 MiB)" in lines[0]


def test_a_process_on_a_card_the_server_does_not_use_is_not_waited_for(tmp_path, monkeypatch) -> None:
    fake_smi(tmp_path, monkeypatch, cards_xml((BUS0, 1, []), (BUS1, 20483, [WORKER])))
    assert gpu_wait.main(["--devices", "0", "--timeout", "0"]) == 0


def test_a_desktops_graphics_are_allowed_up_to_the_setting_and_named(tmp_path, monkeypatch, capsys) -> None:
    """The desktop less its compute process: Xorg and gnome-shell, type G, 45 MiB together. Within
    --graphics-max-mib the start goes on and its line names them; above it, or with 0, the card is held and the
    line says by how much and which setting."""
    fake_smi(tmp_path, monkeypatch, cards_xml(("00000000:0A:00.0", 159, [XORG, SHELL])))
    assert gpu_wait.main(["--devices", "0", "--graphics-max-mib", "64", "--timeout", "0"]) == 0
    assert capsys.readouterr().out == (
        "vllm-rig-gpu-wait: GPUs free after 0s; "
        "GPU 0: Xorg 36 MiB, gnome-shell 9 MiB (a desktop's graphics, allowed up to 64 MiB)\n"
    )
    assert gpu_wait.main(["--devices", "0", "--graphics-max-mib", "40", "--timeout", "0"]) == 1
    out = capsys.readouterr().out
    assert "GPU 0 (00000000:0A:00.0) is held by pid 1229 /usr/lib/xorg/Xorg (graphics, 36 MiB), pid 1475 " in out
    assert ": graphics 45 MiB, more than the 40 MiB a desktop's graphics may hold (gpu_wait_graphics_max_mib)" in out
    assert gpu_wait.main(["--devices", "0", "--timeout", "0"]) == 1  # 0, the program's own default: none
    assert "graphics 45 MiB, no desktop's graphics allowed (gpu_wait_graphics_max_mib)" in capsys.readouterr().out


def test_a_compute_process_beside_a_desktop_holds_the_card_whatever_the_allowance(
    tmp_path, monkeypatch, capsys
) -> None:
    """The desktop whole: its compute process holds the card even where the desktop's graphics would be
    allowed; a C+G process counts as compute too."""
    fake_smi(tmp_path, monkeypatch, cards_xml(("00000000:0A:00.0", 159, [XORG, SHELL, POSTGRES])))
    assert gpu_wait.main(["--devices", "0", "--graphics-max-mib", "1024", "--timeout", "0"]) == 1
    out = capsys.readouterr().out
    assert "is held by pid 159183 postgres: user db 127.0.0.1(60178) idle (compute, 109 MiB), pid 1229 " in out
    assert "pid 1229 /usr/lib/xorg/Xorg (graphics, 36 MiB), pid 1475 /usr/bin/gnome-shell (graphics, 9 MiB)" in out
    assert "allowed up to" not in out
    fake_smi(tmp_path, monkeypatch, cards_xml(("00000000:0A:00.0", 159, [XORG, SHELL, {**POSTGRES, "type": "C+G"}])))
    assert gpu_wait.main(["--devices", "0", "--graphics-max-mib", "1024", "--timeout", "0"]) == 1
    assert (
        "pid 159183 postgres: user db 127.0.0.1(60178) idle (compute and graphics, 109 MiB)" in capsys.readouterr().out
    )


def test_a_desktop_on_each_card_is_judged_per_card(tmp_path, monkeypatch, capsys) -> None:
    """nvitop-152's three cards: GPU 2's X server and gnome-shell (98 MiB) are over 64 MiB and under 128;
    GPU 0's compute process holds it at any allowance; memory.used still counts the desktop's memory."""
    fake_smi(tmp_path, monkeypatch, cards_xml(*NVITOP))
    assert gpu_wait.main(["--devices", "2", "--graphics-max-mib", "64", "--timeout", "0"]) == 1
    assert "graphics 98 MiB, more than the 64 MiB" in capsys.readouterr().out
    assert gpu_wait.main(["--devices", "2", "--graphics-max-mib", "128", "--timeout", "0"]) == 0
    assert (
        "GPU 2: X 64 MiB, gnome-shell 34 MiB (a desktop's graphics, allowed up to 128 MiB)" in capsys.readouterr().out
    )
    assert gpu_wait.main(["--devices", "0,2", "--graphics-max-mib", "128", "--timeout", "0"]) == 1
    out = capsys.readouterr().out
    assert f"not starting: GPU 0 ({BUS0}) is held by pid 10734 foo_bar (compute, 160 MiB), pid 58661 " in out
    assert "; GPU 2: X 64 MiB, gnome-shell 34 MiB (a desktop's graphics, allowed up to 128 MiB) after waiting" in out
    args = ["--devices", "2", "--graphics-max-mib", "128", "--max-used-mib", "90", "--timeout", "0"]
    assert gpu_wait.main(args) == 1
    assert f"GPU 2 ({BUS2}) has 98 MiB in use (at most 90 allowed); GPU 2: X 64" in capsys.readouterr().out


def test_the_unit_passes_the_desktop_allowance_to_the_wait() -> None:
    s = load_settings(profile_data())
    assert s.gpu_wait_graphics_max_mib == 64
    assert "--graphics-max-mib 64 " in gpu_wait_command(s, Layout.of(s))
    other = load_settings({**profile_data(), "gpu_wait_graphics_max_mib": 0})
    assert "--graphics-max-mib 0 " in gpu_wait_command(other, Layout.of(other))


def test_memory_in_use_without_a_process_is_named(tmp_path, monkeypatch, capsys) -> None:
    fake_smi(tmp_path, monkeypatch, cards_xml((BUS0, 1, []), (BUS1, 5000, [])))
    assert gpu_wait.main(["--devices", "all", "--max-used-mib", "1024", "--timeout", "0"]) == 1
    assert "GPU 1 (00000000:02:00.0) has 5000 MiB in use (at most 1024 allowed)" in capsys.readouterr().out
    assert gpu_wait.main(["--devices", "all", "--max-used-mib", "8000", "--timeout", "0"]) == 0


def test_a_missing_gpu_and_a_failing_nvidia_smi_fail_the_wait(tmp_path, monkeypatch, capsys) -> None:
    fake_smi(tmp_path, monkeypatch, cards_xml((BUS0, 1, [])))
    assert gpu_wait.main(["--devices", "0,1", "--timeout", "0"]) == 1
    assert "GPU 1 is not there" in capsys.readouterr().out
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_wait.main(["--devices", "0,1", "--timeout", "0"]) == 1


# Kernel lines as NVIDIA's driver prints them (from public reports: NVIDIA/open-gpu-kernel-modules#1151 for
# the 5xx "PCI:" form, older drivers without it).
KERNEL = """\
NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted
NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted
NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100
NVRM: Xid (PCI:0000:01:00): 154, something new
usb 2-3: reset high-speed USB device
"""


def test_xid_events_are_named_in_one_line() -> None:
    events = nvrm.xid_events(KERNEL)
    assert events == [
        ("0000:2b:00", 79),
        ("0000:08:00", 31),
        ("0000:08:00", 31),
        ("0000:01:00", 13),
        ("0000:01:00", 154),
    ]
    line = nvrm.describe(KERNEL)  # what the watchdog says of the kernel's log
    assert "\n" not in line
    assert line.startswith("Xid 79 on 0000:2b:00 (GPU has fallen off the bus); Xid 31 on 0000:08:00 (GPU memory page")
    assert "x2" in line and "Xid 13 on 0000:01:00 (graphics engine exception)" in line
    assert "Xid 154 on 0000:01:00 (see NVIDIA's Xid catalog)" in line
    assert nvrm.describe("nothing here") == ""


def test_kv_cache_first_size_is_recorded_and_a_smaller_one_restarts_once(tmp_path) -> None:
    said: list[str] = []
    state_dir, record = tmp_path, str(tmp_path / "kv-cache.json")
    assert start_check.kv_verdict(207_692, 0.2, 1, said.append, record) == (True, "KV cache 207,692 tokens recorded")
    assert json.loads((state_dir / "kv-cache.json").read_text())["tokens"] == 207_692
    assert start_check.kv_verdict(180_000, 0.2, 1, said.append, record)[0] is True  # 13% smaller: within the share
    ok, detail = start_check.kv_verdict(103_846, 0.2, 1, said.append, record)
    assert not ok and "50% below the recorded 207,692" in detail and "restarting once" in detail
    ok, detail = start_check.kv_verdict(103_846, 0.2, 2, said.append, record)  # the start after that restart
    assert ok and said and said[-1].startswith("WARNING: KV cache 103,846 tokens")
    assert json.loads((state_dir / "kv-cache.json").read_text())["tokens"] == 207_692  # the record stays
    assert start_check.kv_verdict(None, 0.2, 1, said.append, record)[0] is True


def test_another_server_command_starts_a_new_kv_record_instead_of_failing(tmp_path) -> None:
    """A switch to another model (or other memory flags) makes another pool size: not a shrunken cache."""
    record = str(tmp_path / "kv-cache.json")
    assert start_check.kv_verdict(207_692, 0.2, 1, print, record, key="model-a")[0] is True
    ok, detail = start_check.kv_verdict(90_000, 0.2, 1, print, record, key="model-b")
    assert ok and detail == "KV cache 90,000 tokens recorded"
    assert json.loads(Path(record).read_text()) | {"boot_id": None} == {
        "tokens": 90_000,
        "key": "model-b",
        "boot_id": None,
    }
    assert start_check.kv_verdict(40_000, 0.2, 1, print, record, key="model-b")[0] is False  # same command: shrunk


def test_the_units_kv_key_follows_the_server_command() -> None:
    s = load_settings(profile_data())
    layout = Layout.of(s)
    assert kv_key(s, layout) == kv_key(s, layout)
    assert kv_key(s.model_copy(update={"max_model_len": 50000}), layout) != kv_key(s, layout)
    assert kv_key(s.model_copy(update={"model_dir": "/opt/other"}), layout) != kv_key(s, layout)


def test_results_are_written_whole_with_the_contract_keys(tmp_path) -> None:
    path = tmp_path / "start-check.json"
    start_check.write_json(str(path), start_check.result(False, "needle", "expected 1, answered 2"))
    data = json.loads(path.read_text())
    assert set(data) == {"time", "ok", "check", "detail", "boot_id"} and data["time"].endswith("Z")
    assert data["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert [p.name for p in tmp_path.iterdir()] == ["start-check.json"]  # no temporary file left


def test_the_watchdog_restarts_after_n_failures_then_gives_up_once(tmp_path, monkeypatch, capsys) -> None:
    restarts: list[list[str]] = []

    class Run:
        def __init__(self, out: str) -> None:
            self.stdout, self.returncode = out, 0

    def fake_run(cmd, **_kw):
        if cmd[:2] == ["systemctl", "is-active"]:
            return Run("active\n")
        if cmd[:2] == ["systemctl", "restart"]:
            restarts.append(cmd)
        return Run("")

    monkeypatch.setattr(watchdog.subprocess, "run", fake_run)
    wrong = watchdog.service_probe.Result("arithmetic", False, "123+456: expected 579, answered '1+2=3'")
    monkeypatch.setattr(watchdog.service_probe, "check_arithmetic", lambda *a, **k: wrong)
    args = ["--unit", "vllm.service", "--base-url", "http://127.0.0.1:9", "--model", "m", "--failures", "2"]
    args += ["--max-restarts", "1", "--result", str(tmp_path / "w.json"), "--state", str(tmp_path / "s.json")]
    for _ in range(6):
        watchdog.main(args)
    out = capsys.readouterr().out
    assert len(restarts) == 1 and out.count("giving up") == 1 and "answered '1+2=3'" in out
    record = json.loads((tmp_path / "w.json").read_text())
    assert record["ok"] is False and record["check"] == "arithmetic" and record["failures_in_row"] == 4
    right = watchdog.service_probe.Result("arithmetic", True, "123+456 -> 579")
    monkeypatch.setattr(watchdog.service_probe, "check_arithmetic", lambda *a, **k: right)
    watchdog.main(args)
    assert json.loads((tmp_path / "w.json").read_text())["failures_in_row"] == 0


def test_a_real_cuda_process_on_a_real_h100_is_named_as_the_xml_gives_it(tmp_path, monkeypatch, capsys) -> None:
    """The real H100's XML while a torch process held 1.5 GB of GPU 0 (h100-xml/nvidia-smi_q_x_cuda_process):
    named with its memory, compute, never graphics; the same box idle (nvidia-smi_q_x) is free."""
    fake_smi(tmp_path, monkeypatch, real_xml("nvidia-smi_q_x_cuda_process"))
    assert gpu_wait.main(["--devices", "0", "--timeout", "0"]) == 1
    out = capsys.readouterr().out
    assert "GPU 0 (00000000:00:06.0) is held by pid 518 python3 (compute, 1542 MiB)" in out and "graphics" not in out
    fake_smi(tmp_path, monkeypatch, real_xml("nvidia-smi_q_x"))
    assert gpu_wait.main(["--devices", "0", "--timeout", "0"]) == 0
