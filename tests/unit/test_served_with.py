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


def _switched_box(root: Path) -> dict[str, Path]:
    """This run switched `current` to runtimes/new (it never served) from runtimes/old (its unit and environment
    saved by the switch) and installed BAD; the real rollback script is in place."""
    from tests.unit.test_rollback_words import _script

    for name in ("old", "new"):
        (root / "runtimes" / name).mkdir(parents=True)
        (root / "runtimes" / name / "runtime.json").write_text("{}")
    (root / "current").symlink_to(root / "runtimes" / "new")
    (root / "previous").symlink_to(root / "runtimes" / "old")
    (root / "etc").mkdir()
    files = {"unit": root / "etc" / "vllm.service", "env": root / "etc" / "vllm-environment.env"}
    files["unit"].write_text(BAD)
    files["env"].write_text("CUDA_HOME=/usr/local/cuda-12.9\nVLLM_NEW=1\n")
    saved = root / "served-with" / "old"
    saved.mkdir(parents=True)
    (saved / "unit").write_text(GOOD)
    (saved / "environment").write_text("CUDA_HOME=/usr/local/cuda-12.9\n")
    (root / "bin").mkdir()
    (root / "bin" / "vllm-rig-rollback").write_text(_script(root))
    (root / "bin" / "vllm-rig-rollback").chmod(0o755)
    stubs = root / "stubs"
    stubs.mkdir()
    (stubs / "id").write_text("#!/bin/sh\necho 0\n")
    (stubs / "systemctl").write_text(
        f'#!/bin/sh\necho "$* $(cat {files["unit"]})" >> {root}/systemctl.log\n[ "$1" != is-active ] || exit 3\n'
    )
    (stubs / "said").write_text(f"#!/bin/sh\necho {SAID!r}\nexit 1\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    return files


def test_a_failed_start_on_a_runtime_this_run_switched_to_rolls_back_to_the_last_that_served(tmp_path: Path) -> None:
    files = _switched_box(tmp_path)
    said = _failed_start(tmp_path).splitlines()
    assert said == [
        f"{SAID}; runtime new never served: rolled back to runtime old, which serves again with the unit and "
        "environment it served with (start check passed); change the setting the server refused, then deploy "
        "again (it switches to new again)"
    ]
    assert (tmp_path / "current").resolve() == tmp_path / "runtimes" / "old"
    assert files["unit"].read_text() == GOOD and files["env"].read_text() == "CUDA_HOME=/usr/local/cuda-12.9\n"
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    assert calls[-1] == f"restart vllm.service {GOOD.strip()}"  # started and proven with the unit put back
    # The runtime left is not marked rolled back and keeps no unit of its own: a next deploy with the setting
    # fixed switches to it again and starts it with the unit it renders.
    assert not (tmp_path / "runtimes" / "new" / "rolled-back").exists()
    assert not (tmp_path / "served-with" / "new").exists()


def test_with_no_runtime_to_roll_back_to_the_reason_alone_is_said(tmp_path: Path) -> None:
    files = _switched_box(tmp_path)
    (tmp_path / "previous").unlink()
    assert _failed_start(tmp_path).splitlines() == [SAID]
    assert files["unit"].read_text() == BAD and (tmp_path / "current").resolve() == tmp_path / "runtimes" / "new"


def test_a_rollback_that_fails_is_said_and_nothing_is_started(tmp_path: Path) -> None:
    _switched_box(tmp_path)
    (tmp_path / "runtimes" / "old" / "runtime.json").unlink()  # the rollback script refuses an incomplete runtime
    said = _failed_start(tmp_path).splitlines()
    assert said == [f"{SAID}; runtime new never served, and rolling back to runtime old did not start either: {SAID}"]
    assert (tmp_path / "current").resolve() == tmp_path / "runtimes" / "new"  # nothing switched
    calls = (tmp_path / "systemctl.log").read_text().splitlines() if (tmp_path / "systemctl.log").exists() else []
    assert not [c for c in calls if c.startswith("restart ")]
