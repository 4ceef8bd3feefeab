"""A hostile artifact store against vllm_rig/host/runtime_artifact.py install() on this machine's Python
(tests/hostile_artifacts.py makes the archives; tests/sandbox/test_artifact_hostile.py runs them on the
sandbox host's Python as root). Each is refused with its one line, changes nothing outside the runtime and
leaves nothing inside it, no staging directory either."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import hostile_artifacts as h
from vllm_rig.host import runtime_artifact as ra


@pytest.mark.parametrize("case", sorted(h.REFUSED))
def test_a_hostile_artifact_is_refused_and_changes_nothing(tmp_path: Path, case: str) -> None:
    add, reason = h.REFUSED[case]
    runtime = h.make_box(tmp_path)
    store = h.make_store(tmp_path, str(tmp_path), add)
    before = h.snapshot(tmp_path)
    with pytest.raises(ra.ArtifactError) as err:
        ra.install(runtime, h.FP, store)
    assert h.snapshot(tmp_path) == before
    assert re.search(reason, str(err.value)), str(err.value)


def test_a_good_artifact_lands_whole_with_its_links_and_no_setuid(tmp_path: Path) -> None:
    runtime = h.make_box(tmp_path)
    (runtime / "venv").mkdir()
    (runtime / "venv" / "stale").write_text("from a build cut short")
    ra.install(runtime, h.FP, h.make_store(tmp_path, str(tmp_path), h.good))
    assert (runtime / "venv" / "bin" / "tool").stat().st_mode & 0o7777 == 0o755
    assert os.readlink(runtime / "venv" / "bin" / "python") == "/usr/bin/python3.12"
    assert os.readlink(runtime / "venv" / "lib" / "up") == "../../src/flashqla"
    assert (runtime / "src" / "flashqla" / "flash_qla" / "ops.py").read_bytes() == b"adapted"
    assert (runtime / "src" / "flashqla" / "flash_qla" / "__init__.py").read_text() == "# checkout\n"
    assert not (runtime / "venv" / "stale").exists()  # the venv is replaced whole
    assert [p.name for p in runtime.parent.iterdir()] == [runtime.name]  # no staging directory left
