"""bin/deploy's and bin/rig's pyinfra: Ctrl-C is exit 130 and one line with nothing after it (a real pyinfra
sent SIGINT), and the next step prints after pyinfra's own output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_rig.cli import pyinfra_run, rig
from vllm_rig.core import end_of_run

REPO = Path(__file__).resolve().parents[2]


def test_the_deferred_lines_print_after_pyinfras_output(capsys: pytest.CaptureFixture) -> None:
    def fake_pyinfra(argv: list[str]) -> int:
        end_of_run.say("[box] next: try it: curl ...")
        print("--> Results:\n    box  Success")
        return 0

    try:
        assert pyinfra_run.main(["inventory.py", "deploy.py"], run=fake_pyinfra) == 0
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        end_of_run._deferred = None
    out = capsys.readouterr().out.splitlines()
    assert out == ["--> Results:", "    box  Success", "", "[box] next: try it: curl ..."]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["inventory.py", "deploy.py"], pyinfra_run.CHANGES),
        (["-y", "inventory.py", "tasks/logs.py"], "stopped following (Ctrl-C); nothing on the box changed"),
        (["-y", "inventory.py", "tasks/status.py"], "stopped (Ctrl-C); this command only reads: nothing on the box "
                                                    "changed"),
    ],
)  # fmt: skip
def test_the_line_says_what_goes_on_on_the_box(argv: list[str], line: str) -> None:
    assert pyinfra_run.interrupted_line(argv) == line


def test_ctrl_c_in_a_real_pyinfra_run_is_130_and_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    deploy = tmp_path / "slow_deploy.py"
    # Prints while it waits, as a build's streamed lines do: none may come after the line.
    deploy.write_text(
        "import pathlib, sys, time\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "for i in range(600):\n    print('build line', i, flush=True)\n    time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_rig.cli.pyinfra_run", "-y", "@local", str(deploy)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate(timeout=10)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-1000:] + err[-1000:]
    assert err.splitlines()[-1] == pyinfra_run.CHANGES, err[-1000:]
    assert "Traceback" not in out + err and "Exiting upon user request" not in out + err
    last = out.splitlines()[-1] if out.strip() else ""
    time.sleep(0.3)  # nothing printed after the exit (the process is gone; the pipe is closed)
    assert out.splitlines()[-1:] == ([last] if last else [])


def test_bin_rig_waits_out_ctrl_c_without_a_traceback() -> None:
    """The step gets Ctrl-C with bin/rig (one process group): bin/rig says nothing and returns its 130."""
    step = rig.Step(("bash", "-c", f"kill -INT {os.getpid()}; sleep 0.3; exit 130"))
    assert rig.run([step]) == 130
    assert rig.run([rig.Step(("bash", "-c", "kill -INT $$"))]) == 130
