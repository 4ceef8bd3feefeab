"""A start that fails on a unit or environment this run installed puts back the ones the runtime last served with
and proves them (a failed run leaves the box serving), in one line that says both: the server's own words and
that the earlier settings serve again. The shell runs for real here, systemctl and the server's words stubbed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from vllm_rig.paths import SERVED_WITH_DIR, STATE_DIR
from vllm_rig.stages.runtime import served_with

SAID = "vllm.service: the server exited (status=2/INVALIDARGUMENT): vllm serve: error: argument --seed: invalid int"
GOOD, BAD = "ExecStart=vllm serve --seed 0\n", "ExecStart=vllm serve --seed=not-a-number\n"


def _box(root: Path, restart_ok: bool = True) -> dict[str, Path]:
    """runtimes/a is current, its unit and environment saved when they were proven; this run installed BAD."""
    (root / "runtimes" / "a").mkdir(parents=True)
    (root / "current").symlink_to(root / "runtimes" / "a")
    (root / "etc").mkdir()
    files = {"unit": root / "etc" / "vllm.service", "env": root / "etc" / "vllm-environment.env"}
    files["unit"].write_text(GOOD)
    files["env"].write_text("CUDA_HOME=/usr/local/cuda-12.9\n")
    files["env"].chmod(0o600)
    name = served_with.current_name_word(str(root))
    saved = served_with.save_command(str(files["unit"]), str(files["env"]), name, top=f"{root}/served-with")
    stubs = root / "stubs"
    stubs.mkdir()
    (stubs / "systemctl").write_text(
        f'#!/bin/sh\necho "$* $(cat {files["unit"]})" >> {root}/systemctl.log\n'
        f'[ "$1" != restart ] || exit {0 if restart_ok else 1}\n'
    )
    (stubs / "said").write_text(f"#!/bin/sh\necho {SAID!r}\nexit 1\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    _sh(root, saved)
    files["unit"].write_text(BAD)
    files["env"].write_text("CUDA_HOME=/usr/local/cuda-12.9\nVLLM_NEW=1\n")
    return files


def _sh(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{root}/stubs:/usr/bin:/bin"}
    run = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0, run.stderr
    return run


def _failed_start(root: Path) -> str:
    unit, env = f"{root}/etc/vllm.service", f"{root}/etc/vllm-environment.env"
    command = served_with.put_back_command(unit, env, str(root), "vllm", "said", top=f"{root}/served-with")
    return _sh(root, command).stdout


def test_a_start_that_fails_on_new_settings_puts_back_the_ones_last_served_and_proves_them(tmp_path: Path) -> None:
    files = _box(tmp_path)
    said = _failed_start(tmp_path).splitlines()
    back = "the unit and environment runtime a last served with are back and serve again (start check passed)"
    back += "; change the setting the server refused, then deploy again"  # the owner's next step
    assert said == [f"{SAID}; {back}"]
    assert files["unit"].read_text() == GOOD
    assert files["env"].read_text() == "CUDA_HOME=/usr/local/cuda-12.9\n"
    assert files["env"].stat().st_mode & 0o777 == 0o600  # still root-only
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    # systemd reads the unit put back before the restart that proves it (its start check runs in the restart)
    assert calls == [f"daemon-reload {GOOD.strip()}", f"restart vllm.service {GOOD.strip()}"]


def test_settings_put_back_that_fail_too_are_said_with_both_lines(tmp_path: Path) -> None:
    _box(tmp_path, restart_ok=False)
    said = _failed_start(tmp_path).splitlines()
    assert said == [f"{SAID}; the settings runtime a last served with were put back but did not start either: {SAID}"]


def test_a_start_that_fails_on_the_settings_last_served_changes_nothing(tmp_path: Path) -> None:
    files = _box(tmp_path)
    files["unit"].write_text(GOOD)  # the same unit and environment failed: nothing of this run's to take back
    files["env"].write_text("CUDA_HOME=/usr/local/cuda-12.9\n")
    assert _failed_start(tmp_path).splitlines() == [SAID]
    assert not (tmp_path / "systemctl.log").exists()


def test_with_nothing_saved_the_reason_alone_is_said(tmp_path: Path) -> None:
    files = _box(tmp_path)
    for saved in (tmp_path / "served-with" / "a").iterdir():
        saved.unlink()
    assert _failed_start(tmp_path).splitlines() == [SAID]
    assert files["unit"].read_text() == BAD and not (tmp_path / "systemctl.log").exists()


def test_what_was_saved_goes_with_the_state_directory_that_remove_deletes() -> None:
    assert SERVED_WITH_DIR.startswith(STATE_DIR + "/")
