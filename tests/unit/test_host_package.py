"""The host programs ship as one zip (vllm_rig.core.host_package): the same bytes from the same sources,
every program runnable from it, and nothing in it that the host's bare Python lacks."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from tests import host_scripts
from vllm_rig.core import host_package
from vllm_rig.host.__main__ import PROGRAMS

HOST = Path(host_package.__file__).resolve().parents[1] / "host"


def test_the_zip_is_the_same_bytes_every_time_and_holds_every_host_module() -> None:
    first = host_package.zip_bytes()
    host_package.zip_bytes.cache_clear()
    assert host_package.zip_bytes() == first  # a re-run uploads nothing
    names = set(zipfile.ZipFile(BytesIO(first)).namelist())
    assert {f"vllm_rig/host/{p.name}" for p in HOST.glob("*.py")} <= names
    assert {"__main__.py", "vllm_rig/__init__.py"} <= names


def test_each_program_module_exists_and_every_module_is_listed_or_a_library() -> None:
    assert {f"{p}.py" for p in PROGRAMS} <= {p.name for p in HOST.glob("*.py")}


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_program_runs_from_the_zip(program: str) -> None:
    # --help, or for build_runtime (it takes one spec path) no argument: each prints its usage line
    args = [] if program == "build_runtime" else ["--help"]
    result = subprocess.run([*host_scripts.program(program), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 2), result.stderr
    assert f"usage: {program}.py" in result.stdout + result.stderr


def test_an_unknown_program_is_one_usage_line() -> None:
    result = subprocess.run(host_scripts.program("nope"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("usage:") and "model_fetch" in result.stderr


def test_the_host_package_imports_only_the_standard_library_and_itself() -> None:
    # Module level only: gpu_verdict imports torch inside the check that runs in the runtime venv.
    for path in HOST.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # a module of the package
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__", f"{path.name} imports {name}"


def test_a_program_sent_on_stdin_runs_without_an_upload_and_gets_its_secret_env(tmp_path: Path) -> None:
    command = host_package.run_from_stdin("model_preflight", ["--help"], python=sys.executable, secret_env="HF_TOKEN")
    result = subprocess.run(
        ["sh", "-c", command], input=host_package.stdin_text("hf_secret"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "usage: model_preflight.py" in result.stdout
    assert "hf_secret" not in command


def test_the_zip_is_placed_once_per_run_per_destination(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyinfra.context import ctx_host

    class Box:  # a run's Host object
        name = "box"

    placed: list[str] = []
    monkeypatch.setattr(host_package, "config_files", lambda name, files: placed.extend(f.dest for f in files))
    with ctx_host.use(Box()):
        for _ in range(6):  # every stage of deploy.py that runs a host program
            host_package.host_programs("/opt/a/vllm-rig-host.pyz")
        host_package.host_programs("/opt/b/vllm-rig-host.pyz")
    assert placed == ["/opt/a/vllm-rig-host.pyz", "/opt/b/vllm-rig-host.pyz"]
    with ctx_host.use(Box()):  # the next run (its own Host objects) checks it again
        host_package.host_programs("/opt/a/vllm-rig-host.pyz")
    assert placed[-1] == "/opt/a/vllm-rig-host.pyz" and len(placed) == 3
