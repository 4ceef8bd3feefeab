"""The stand-in fork's release_speeds knob: a release's own speeds, chosen by the checkout's VERSION file."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

KNOBS = Path(__file__).resolve().parent / "fixtures" / "forge" / "standin_fork" / "vllm" / "standin" / "knobs.py"


def _knobs_in_checkout(root: Path, version: str):
    """knobs.py as it sits in a built checkout (<root>/vllm/standin/knobs.py beside <root>/VERSION)."""
    target = root / "vllm" / "standin" / "knobs.py"
    target.parent.mkdir(parents=True)
    shutil.copyfile(KNOBS, target)
    (root / "VERSION").write_text(version + "\n")
    spec = importlib.util.spec_from_file_location(f"knobs_{version.replace('.', '_')}", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("version", "decode", "prefill"), [("0.1.17", 85.0, 1300.0), ("0.1.18", 60.0, 1300.0)])
def test_a_release_decodes_at_its_own_speed(tmp_path: Path, monkeypatch, version: str, decode: float, prefill: float):
    knob_file = tmp_path / "forge.json"
    knob_file.write_text(json.dumps({"release_speeds": {"0.1.18": {"decode_tps": 60, "build_fail": True}}}))
    monkeypatch.setenv("VLLM_STANDIN_KNOBS", str(knob_file))
    knobs = _knobs_in_checkout(tmp_path / "src", version).load()
    assert (knobs["decode_tps"], knobs["prefill_tps"]) == (decode, prefill)
    assert knobs["build_fail"] is False  # only speeds can differ per release
