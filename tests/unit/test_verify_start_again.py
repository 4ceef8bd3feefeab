"""The GPU verdict stops the service and starts it again: only with the unit this run leaves on the box. A switch
of runtime kind changes the unit (the upstream kind's --reasoning-config budget, which the fork refuses with exit
2), and the verdict started the new runtime with the old unit; the service stage starts it, once, with the new one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vllm_rig.stages.verify.deploy import start_again


def run_start_again(tmp_path: Path, on_box: str | None, rendered: str) -> tuple[str, str]:
    unit_path = tmp_path / "vllm.service"
    if on_box is not None:
        unit_path.write_text(on_box)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    (fake / "systemctl").chmod(0o755)
    shell = start_again("vllm.service", str(unit_path), rendered, "echo gone")
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env={"PATH": f"{fake}:/usr/bin:/bin"})
    calls = tmp_path / "calls"
    return out.stdout, calls.read_text() if calls.exists() else ""


def test_the_verdict_starts_the_service_again_when_its_unit_stays(tmp_path: Path) -> None:
    out, calls = run_start_again(
        tmp_path, "ExecStart=vllm serve --reasoning-config X\n", "ExecStart=vllm serve --reasoning-config X\n"
    )
    assert calls == "start vllm.service\n"


@pytest.mark.parametrize(
    "on_box", ["ExecStart=vllm serve --reasoning-config X\n", None], ids=["kind-switch", "no-unit"]
)
def test_the_verdict_leaves_it_stopped_when_the_service_stage_installs_a_new_unit(tmp_path: Path, on_box) -> None:
    out, calls = run_start_again(tmp_path, on_box, "ExecStart=vllm serve\n")
    assert calls == ""
    assert "left stopped: its unit changes in this run" in out


def test_a_runtime_kind_switch_changes_the_unit_both_ways() -> None:
    """upstream -> fork and back: the rendered unit differs, so the verdict never starts the old one."""
    from vllm_rig.paths import Layout
    from vllm_rig.stages.service.unit import render_unit
    from vllm_rig.validation import load_settings

    from .groupdata import profile_data

    units = {}
    for kind in ("upstream", "fork"):
        s = load_settings({**profile_data(), "runtime_kind": kind})
        units[kind] = render_unit(s, Layout.of(s))
    assert units["upstream"] != units["fork"]
