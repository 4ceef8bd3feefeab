"""The batched facts and operations that keep a no-op re-run at about one remote command per operation."""

from __future__ import annotations

import subprocess
from pathlib import Path

from vllm_rig.core.alternatives import Alternative
from vllm_rig.core.files import FilesState, _differs, rendered, text


def _run(command: str) -> list[str]:
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=True).stdout.splitlines()


def test_files_state_reads_many_files_in_one_command(tmp_path: Path) -> None:
    a = tmp_path / "a.conf"
    a.write_text("x\n")
    a.chmod(0o640)
    fact = FilesState()
    state = fact.process(_run(fact.command(paths=(str(a), str(tmp_path / "missing")))))
    assert state[str(tmp_path / "missing")] is None
    assert state[str(a)]["sha256"] == text(str(a), "x\n").sha256 and state[str(a)]["mode"] == "640"


def test_a_file_differs_on_content_mode_or_owner() -> None:
    wanted = text("/etc/x", "x\n")
    same = {"sha256": wanted.sha256, "mode": "644", "user": "root", "group": "root"}
    assert not _differs(wanted, same)
    assert _differs(wanted, {**same, "mode": "600"}) and _differs(wanted, {**same, "user": "vllm"})
    assert _differs(wanted, {**same, "sha256": "0" * 64}) and _differs(wanted, None)


def test_templates_render_like_pyinfra_does() -> None:
    f = rendered("/etc/profile.d/x.sh", "cuda/profile-cuda.sh.j2", cuda_home="/usr/local/cuda-12.9")
    assert b"export CUDA_HOME=/usr/local/cuda-12.9" in f.content


def test_alternative_fact_reads_mode_and_target_together() -> None:
    assert Alternative().process(["@@mode", "manual", "@@target", "/usr/local/cuda-12.9"]) == {
        "mode": "manual",
        "target": "/usr/local/cuda-12.9",
    }
    assert Alternative().process(["@@mode", "@@target"]) == {"mode": None, "target": None}
