"""A SIGTERM (systemctl stop) that lands while the hf child is forked is not lost.

A CI run printed "Exception ignored in: <function _releaseLock ...> SystemExit: 143": the handler's
SystemExit was raised inside Python's at-fork hooks (run because of the preexec hook) and dropped, so
the fetch went on and the stop timed out. The stop now waits until the child exists."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vllm_rig.host import model_fetch


@pytest.fixture
def sigterm_exits() -> Any:
    previous = signal.signal(signal.SIGTERM, model_fetch.on_sigterm)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_during_the_fork_ends_the_run_and_takes_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigterm_exits: None
) -> None:
    real_popen = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        signal.raise_signal(signal.SIGTERM)  # the stop arrives mid-fork: its handler runs here, in this thread
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(model_fetch.subprocess, "Popen", popen)
    status = model_fetch.Status(tmp_path / "status.json", "o/r", "main")
    with pytest.raises(SystemExit) as stop:
        model_fetch.run_hf(["sleep", "60"], tmp_path / "hf.log", status, os.open(tmp_path, os.O_RDONLY))
    assert stop.value.code == 128 + signal.SIGTERM
    assert started and started[0].returncode == -signal.SIGTERM  # stopped by the signal, not left or killed
    assert not model_fetch._Stop.deferred and model_fetch._Stop.pending is None
