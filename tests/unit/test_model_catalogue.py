"""vllm_rig/host/model_catalogue.py on real directories laid out as model_fetch.py lays them (huggingface_hub's cache
beside the model directories, and the layout before it): the record of served models, models_keep through the
library's delete_revisions (a blob a kept revision shares not counted as freed), and the served model never
removed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from vllm_rig.host import model_catalogue as mc

MIB = 1 << 20


def _blob(snapshot: Path, name: str, data: bytes) -> None:
    """A file of the snapshot as the library lays it: blobs/<sha256>, and the snapshot's relative link to it."""
    blob = snapshot.parent.parent / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))


def _model(root: Path, name: str, commit: str, size: int, shared: bytes = b"") -> Path:
    """DIR -> hf-cache/models--o--m/snapshots/<commit>/ with a shard of `size` bytes (and `shared`, a file
    another revision holds too: one blob)."""
    snapshot = root / "hf-cache" / "models--o--m" / "snapshots" / (commit * 40)[:40]
    snapshot.mkdir(parents=True)
    _blob(snapshot, "model.safetensors", os.urandom(size))
    _blob(snapshot, "config.json", b"{}")
    if shared:
        _blob(snapshot, "shared.safetensors", shared)
    (root / name).symlink_to(os.path.relpath(snapshot, root))
    (root / f".{name}.fetch.lock").write_text("1\n")
    return root / name


def _old_model(root: Path, name: str, commit: str, size: int) -> Path:
    """The layout before the cache: DIR -> DIR.rev-<commit12>/ with plain files."""
    snapshot = root / f"{name}.rev-{commit}"
    snapshot.mkdir()
    (snapshot / "model.safetensors").write_bytes(os.urandom(size))
    (root / name).symlink_to(snapshot.name)
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
    shared = os.urandom(2 * MIB)
    a = _model(models, "A", "a", 1 * MIB, shared=shared)
    b = _model(models, "B", "b", 3 * MIB, shared=shared)
    c = _old_model(models, "C", "cccccccccccc", 1 * MIB)
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
    assert 3.0 <= freed < 3.1, line  # B's own 3 MiB shard; the 2 MiB blob A shares frees nothing
    assert (box["a"] / "shared.safetensors").stat().st_size == 2 * MIB
    assert (
        not box["b"].exists() and not (box["models"] / "hf-cache" / "models--o--m" / "snapshots" / ("b" * 40)).exists()
    )


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
