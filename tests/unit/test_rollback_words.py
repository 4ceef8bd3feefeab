"""`bin/rig rollback` says plainly what happened: nothing to roll back is no failure, and a roll back from the fork to
an upstream runtime (no src/vllm in it) warms FlashQLA from the directory that is there, not a shell "cd:" error.
A roll back across kinds restarts the runtime with the unit it served with (each kind has its own flags)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.unit.groupdata import profile_data
from vllm_rig.core.files import render_template
from vllm_rig.paths import Layout
from vllm_rig.stages.runtime import served_with
from vllm_rig.stages.runtime.deploy import flashqla_warm_command
from vllm_rig.validation import load_settings


def _script(root: Path) -> str:
    unit, env, saved = f"{root}/etc/vllm.service", f"{root}/etc/vllm-environment.env", f"{root}/served-with"
    return render_template(
        "runtime/vllm-rig-rollback.sh.j2",
        save_unit=served_with.save_command(unit, env, '"$left"', saved),
        restore_unit=served_with.restore_command(unit, env, '"$back"', saved),
        script=f"{root}/bin/vllm-rig-rollback",
        root=str(root),
        service="vllm",
        flashinfer_cache=f"{root}/cache",
        state_dir=f"{root}/state",
        switched_stamp=f"{root}/state/switched",
        flashqla_warm="true",
        flashqla_stamp=f"{root}/state/flashqla",
    )


def test_nothing_to_roll_back_says_so_and_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "runtimes" / "a").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "runtimes" / "a")
    run = subprocess.run(["bash", "-c", _script(tmp_path)], capture_output=True, text=True, check=False)
    assert run.returncode == 0
    assert run.stdout.startswith("nothing to roll back: this box has no earlier runtime")
    assert run.stderr == ""
    assert (tmp_path / "current").resolve() == tmp_path / "runtimes" / "a"  # nothing changed


def test_the_rollback_script_warms_flashqla_in_a_runtime_of_either_kind() -> None:
    s = load_settings({**profile_data(), "runtime_kind": "fork"})
    layout = Layout.of(s)
    warm = flashqla_warm_command(s, layout, either_kind=True)
    assert warm.startswith(f"{{ cd {layout.fork_src} 2>/dev/null || cd {layout.current}; }} && runuser ")
    assert flashqla_warm_command(s, layout).startswith(f"cd {layout.fork_src} && runuser ")  # the deploy's own


def _box(root: Path) -> dict[str, Path]:
    """A box that serves the fork (runtimes/fork, its unit installed) and was on the upstream kind before
    (runtimes/upstream, the unit it served with saved by the deploy's switch); systemctl and id stand in, systemctl
    writing what it was asked to a log."""
    for name in ("fork", "upstream"):
        (root / "runtimes" / name).mkdir(parents=True)
        (root / "runtimes" / name / "runtime.json").write_text("{}")
    (root / "current").symlink_to(root / "runtimes" / "fork")
    (root / "previous").symlink_to(root / "runtimes" / "upstream")
    (root / "etc").mkdir()
    files = {"unit": root / "etc" / "vllm.service", "env": root / "etc" / "vllm-environment.env"}
    files["unit"].write_text("ExecStart=vllm serve (the fork's flags)\n")
    files["env"].write_text("CUDA_HOME=/usr/local/cuda-12.9\n")
    saved = root / "served-with" / "upstream"
    saved.mkdir(parents=True)
    (saved / "unit").write_text("ExecStart=vllm serve --device-ids 0,1 --reasoning-config {budget}\n")
    (saved / "environment").write_text("CUDA_HOME=/opt/vllm-rig/current/venv/nvidia/cu13\n")
    (saved / "environment").chmod(0o600)
    stubs = root / "stubs"
    stubs.mkdir()
    (stubs / "id").write_text("#!/bin/sh\necho 0\n")
    (stubs / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {root}/systemctl.log\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    return files


def _roll_back(root: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{root}/stubs:/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", _script(root)], capture_output=True, text=True, check=False, env=env)


def test_a_roll_back_across_kinds_restarts_with_the_unit_that_runtime_served_with(tmp_path: Path) -> None:
    files = _box(tmp_path)
    run = _roll_back(tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "current").resolve() == tmp_path / "runtimes" / "upstream"
    assert "--device-ids 0,1 --reasoning-config" in files["unit"].read_text()  # the upstream kind's own flags
    assert files["env"].read_text() == "CUDA_HOME=/opt/vllm-rig/current/venv/nvidia/cu13\n"
    assert files["env"].stat().st_mode & 0o777 == 0o600  # still root-only
    assert "vllm.service: the unit and environment upstream served with are back in place" in run.stdout
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    assert calls.index("daemon-reload") < calls.index("try-restart vllm.service")  # restarted with that unit
    # The fork's unit was kept, so rolling forward gives the fork its own flags back.
    assert (tmp_path / "served-with" / "fork" / "unit").read_text() == "ExecStart=vllm serve (the fork's flags)\n"
    forward = _roll_back(tmp_path)
    assert forward.returncode == 0, forward.stderr
    assert files["unit"].read_text() == "ExecStart=vllm serve (the fork's flags)\n"
    assert files["env"].read_text() == "CUDA_HOME=/usr/local/cuda-12.9\n"


def test_a_runtime_with_no_saved_unit_keeps_the_unit_and_says_so(tmp_path: Path) -> None:
    files = _box(tmp_path)
    for saved in (tmp_path / "served-with" / "upstream").iterdir():
        saved.unlink()
    run = _roll_back(tmp_path)
    assert run.returncode == 0, run.stderr
    assert "note: no unit saved for upstream" in run.stderr
    assert files["unit"].read_text() == "ExecStart=vllm serve (the fork's flags)\n"
    assert "daemon-reload" not in (tmp_path / "systemctl.log").read_text()
