"""vllm_rig/host/model_catalogue.py on real directories laid out as model_fetch.py lays them: the record of served
models, models_keep, the space freed (hard links shared with a kept snapshot not counted), and the served model
never removed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllm_rig.host import model_catalogue as mc

MIB = 1 << 20


def _model(root: Path, name: str, commit: str, size: int, share_from: Path | None = None) -> Path:
    """DIR -> DIR.rev-<commit>/ with a shard of `size` bytes (a hard link of `share_from` instead, when given)."""
    snapshot = root / f"{name}.rev-{commit}"
    snapshot.mkdir()
    if share_from is not None:
        os.link(share_from, snapshot / "shared.safetensors")
    (snapshot / "model.safetensors").write_bytes(os.urandom(size))
    (snapshot / "config.json").write_text("{}")
    (root / name).symlink_to(snapshot.name)
    (root / f".{name}.fetch.lock").write_text("1\n")
    return root / name


def _unit(root: Path, model_dir: Path) -> Path:
    unit = root / "vllm-rig-test-nonexistent.service"  # no such unit runs: only the file's --model counts
    unit.write_text(
        f"[Service]\nExecStart=/opt/x/python -m vllm.entrypoints.openai.api_server \\\n  --model {model_dir}\n"
    )
    return unit


def _served(record: Path, unit: Path, model: Path, keep: int, name: str) -> int:
    argv = ["served", "--record", str(record), "--name", name, "--repo", f"o/{name}", "--revision", "main"]
    return mc.main([*argv, "--dir", str(model), "--keep", str(keep), "--unit-file", str(unit)])


@pytest.fixture()
def box(tmp_path: Path) -> dict[str, Path]:
    models = tmp_path / "models"
    models.mkdir()
    a = _model(models, "A", "aaaaaaaaaaaa", 2 * MIB)
    b = _model(models, "B", "bbbbbbbbbbbb", 3 * MIB, share_from=a.resolve() / "model.safetensors")
    c = _model(models, "C", "cccccccccccc", 1 * MIB)
    return {"models": models, "a": a, "b": b, "c": c, "record": tmp_path / "state" / "models.json"}


def test_served_models_are_recorded_newest_first_and_kept_up_to_models_keep(box, capsys) -> None:
    for name in ("C", "B", "A"):  # served in this order; A serves now
        unit = _unit(box["models"], box[name.lower()])
        assert _served(box["record"], unit, box[name.lower()], keep=5, name=name) == 0
    record = json.loads(box["record"].read_text())
    assert [m["name"] for m in record["models"]] == ["A", "B", "C"]
    assert _served(box["record"], unit, box["a"], keep=1, name="A") == 0
    out = capsys.readouterr().out
    assert "removed C (o/C@main)" in out and "kept B (models_keep=1)" in out
    assert (
        not (box["models"] / "C").exists()
        and not list(box["models"].glob("C.*"))
        and not list(box["models"].glob(".C.*"))
    )
    assert (box["b"] / "model.safetensors").is_file() and (box["a"] / "model.safetensors").is_file()


def test_the_space_freed_counts_only_blocks_no_kept_file_links_to(box, capsys) -> None:
    unit = _unit(box["models"], box["a"])
    for name in ("B", "A"):
        _served(box["record"], unit, box[name.lower()], keep=5, name=name)
    assert _served(box["record"], unit, box["a"], keep=0, name="A") == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("model_catalogue: removed B"))
    freed = float(line.rsplit(": ", 1)[1].split()[0])
    assert 3.0 <= freed < 3.1, line  # B's own 3 MiB shard; its hard link to A's 2 MiB shard frees nothing
    assert (box["a"] / "model.safetensors").stat().st_size == 2 * MIB


def test_the_model_the_unit_serves_is_never_removed(box, capsys) -> None:
    unit = _unit(box["models"], box["a"])
    _served(box["record"], unit, box["a"], keep=5, name="A")
    code = mc.main(["remove", "--record", str(box["record"]), "--dir", str(box["a"]), "--unit-file", str(unit)])
    assert code == mc.EXIT_SERVES and "is the model the service serves" in capsys.readouterr().err
    assert (box["a"] / "model.safetensors").is_file()
    # By its snapshot's path too: the same model.
    code = mc.main(
        ["remove", "--record", str(box["record"]), "--dir", str(box["a"].resolve()), "--unit-file", str(unit)]
    )
    assert code == mc.EXIT_SERVES and box["a"].resolve().is_dir()


def test_an_old_model_the_unit_still_names_is_kept_by_served(box, capsys) -> None:
    """The settings serve A now, but the unit on the host still runs B (its restart has not happened): B stays."""
    unit = _unit(box["models"], box["b"])
    _served(box["record"], unit, box["b"], keep=5, name="B")
    assert _served(box["record"], unit, box["a"], keep=0, name="A") == 0
    assert "not removed: " in capsys.readouterr().out and (box["b"] / "model.safetensors").is_file()


def test_remove_takes_a_model_off_the_record(box) -> None:
    unit = _unit(box["models"], box["a"])
    for name in ("C", "A"):
        _served(box["record"], unit, box[name.lower()], keep=5, name=name)
    assert mc.main(["remove", "--record", str(box["record"]), "--dir", str(box["c"]), "--unit-file", str(unit)]) == 0
    assert [m["name"] for m in json.loads(box["record"].read_text())["models"]] == ["A"]
    listed = json.loads(_capture_list(box["record"]))
    assert listed["models"] == [{"name": "A", "repo": "o/A", "revision": "main", "dir": str(box["a"]), "present": True}]


def _capture_list(record: Path) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        mc.main(["list", "--record", str(record)])
    return buf.getvalue()
