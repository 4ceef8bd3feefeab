"""The stand-in fork's requirement files are the real fork's, byte for byte, and its setup.py reads them
as the build does (so the sandbox's pip meets the real set's conflicts)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.real import real_pip

FORK = Path(__file__).resolve().parents[1] / "sandbox" / "fixtures" / "forge" / "standin_fork"
FILES = ("requirements/common.txt", "requirements/cuda.txt", "requirements/build/cuda.txt")


@pytest.mark.skipif(not real_pip.FORK_REQUIREMENTS.is_dir(), reason="no ../shared/real-sources")
@pytest.mark.parametrize("name", FILES)
def test_copies_are_the_real_files(name: str) -> None:
    copy = (FORK / name).read_bytes()
    assert copy == (real_pip.FORK_REQUIREMENTS / name).read_bytes()
    assert copy.startswith(b"# source: ")


def _setup_function(name: str) -> object:
    """One top-level function of setup.py, run without calling setup()."""
    tree = ast.parse((FORK / "setup.py").read_text())
    keep = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) or getattr(n, "name", None) == name]
    namespace: dict[str, object] = {"ROOT": FORK}
    exec(compile(ast.Module(keep, []), "setup.py", "exec"), namespace)
    return namespace[name]


def test_setup_reads_the_runtime_file_as_the_build_does() -> None:
    runtime_requirements = _setup_function("runtime_requirements")
    got = runtime_requirements(FORK / "requirements" / "cuda.txt")  # type: ignore[operator]
    want = real_pip.build_script().requirement_lines(FORK / "requirements" / "cuda.txt")
    assert got == want
    assert all(Requirement(line) for line in got)  # install_requires must be PEP 508, comments gone
    assert "nvidia-cutlass-dsl==4.4.2" in got and "flashinfer-python==0.6.8.post1" in got
