"""`bin/rig rollback` says plainly what happened: nothing to roll back is no failure, and a roll back from the fork to
an upstream runtime (no src/vllm in it) warms FlashQLA from the directory that is there, not a shell "cd:" error."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.unit.groupdata import profile_data
from vllm_rig.core.files import render_template
from vllm_rig.paths import Layout
from vllm_rig.stages.runtime.deploy import flashqla_warm_command
from vllm_rig.validation import load_settings


def _script(root: Path) -> str:
    return render_template(
        "runtime/vllm-rig-rollback.sh.j2",
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
