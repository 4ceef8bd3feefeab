"""The upstream build's patch handling on real files with real git: a patch goes on once, a second run sees
it in place, a tree it does not fit is named file by file and left as it was, and a file whose bytes are
not the known ones is never applied."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests import host_scripts
from vllm_rig.host import upstream_build
from vllm_rig.host.runtime_build import BuildError


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


BEFORE = {
    "vllm/config/reasoning.py": "class ReasoningConfig:\n    reasoning_parser: str = ''\n",
    "vllm/envs.py": "VLLM_X = 1\n",
}
AFTER = {
    "vllm/config/reasoning.py": (
        "class ReasoningConfig:\n    reasoning_parser: str = ''\n    default_thinking_token_budget: int | None = None\n"
    ),
    "vllm/envs.py": "VLLM_X = 1\nVLLM_SM75_SPEC_SYNC_MODE = 'auto'\n",
}


@pytest.fixture
def patch(tmp_path: Path) -> Path:
    """A real git diff between the two trees, with a/ and b/ prefixes as the owner's patch has them."""
    _tree(tmp_path / "a", BEFORE), _tree(tmp_path / "b", AFTER)
    diff = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/", "a", "b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    text = diff.replace("a/a/", "a/").replace("b/b/", "b/")
    path = tmp_path / "sm75.patch"
    path.write_text(text)
    assert upstream_build.patched_files(path) == sorted(BEFORE)
    return path


def _read(root: Path) -> dict[str, str]:
    return {name: (root / name).read_text() for name in BEFORE}


def test_the_patch_goes_on_once_and_a_rerun_sees_it_in_place(tmp_path: Path, patch: Path) -> None:
    site = _tree(tmp_path / "site", BEFORE)
    assert upstream_build.apply_patch(site, patch, "the patch") == "applied"
    assert _read(site) == AFTER
    assert upstream_build.apply_patch(site, patch, "the patch") == "already applied"
    assert _read(site) == AFTER


def test_a_tree_it_does_not_fit_is_named_by_file_and_left_unchanged(tmp_path: Path, patch: Path) -> None:
    other = {**BEFORE, "vllm/envs.py": "VLLM_Y = 2\n"}  # another release's envs.py
    site = _tree(tmp_path / "site", other)
    with pytest.raises(BuildError) as err:
        upstream_build.apply_patch(site, patch, "the SM75 patch to vLLM 9.9")
    message = str(err.value)
    assert "vllm/envs.py" in message and "vllm/config/reasoning.py" not in message, message
    assert "nothing was changed" in message
    assert _read(site) == other  # reasoning.py, which would fit, was not patched either


def test_a_patch_in_a_git_work_tree_applies_to_the_target_not_the_repository(tmp_path: Path, patch: Path) -> None:
    # A site-packages inside someone's checkout: git apply must not resolve paths against that repository.
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    site = _tree(tmp_path / "repo" / "venv" / "site-packages", BEFORE)
    assert upstream_build.apply_patch(site, patch, "the patch") == "applied"
    assert _read(site) == AFTER


def test_bytes_other_than_the_known_ones_are_refused(tmp_path: Path, patch: Path) -> None:
    known = hashlib.sha256(patch.read_bytes()).hexdigest()
    upstream_build.verify_file(patch, known, "the patch")
    patch.write_text(patch.read_text().replace("auto", "nosync"))
    with pytest.raises(BuildError, match=f"not the known {known}"):
        upstream_build.verify_file(patch, known, "the patch")
    with pytest.raises(BuildError, match="missing"):
        upstream_build.verify_file(tmp_path / "nothing.patch", known, "the patch")


LANE = Path(__file__).resolve().parent / "fixtures" / "tool_outputs" / "h200-cuda13-lane" / "lane.txt"


def test_on_a_real_gpu_the_wheels_toolkit_needs_exactly_the_links_the_build_makes() -> None:
    """The capture (its README says how): PyPI's CUDA 13.0 toolkit parts as CUDA_HOME for torch 2.11.0's
    cpp_extension fail to link without the links and build an sm_75 + sm_90 extension that runs with them."""
    text = LANE.read_text()
    without, with_links = text.split("== build with lib64 -> lib and libcudart.so -> libcudart.so.13", 1)
    assert "cannot find -lcudart" in without and "RESULT" not in without
    assert "RESULT 1048576.0 expected 1048576.0" in with_links
    assert "sm_75.cubin" in with_links and "sm_90.cubin" in with_links
    assert "release 13.0, V13.0.88" in text and "2.11.0+cu130 2.11.0 13.0" in text


def test_the_toolkit_step_makes_those_links_and_checks_the_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "nvidia" / "cu13"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "lib" / "libcudart.so.13").write_text("")
    nvcc = home / "bin" / "nvcc"
    version = LANE.read_text().split("== nvcc\n", 1)[1].split("== build", 1)[0]  # the real nvcc's words
    nvcc.write_text(f"#!/bin/sh\ncat <<'EOF'\n{version}EOF\n")
    nvcc.chmod(0o755)
    spec = {
        "runtime": str(tmp_path / "rt"),
        "cache": str(tmp_path / "cache"),
        "pip_index_url": None,
        "cuda_home": str(home),
        "cuda_toolkit": {"version": "13.0.2", "parts": ["nvcc", "crt", "cccl", "cudart", "nvvm"]},
    }
    nvcc_version = {"nvidia-cuda-nvcc": "13.0.88"}
    monkeypatch.setattr(upstream_build.UpstreamBuild, "installed", lambda self, dist: nvcc_version.get(dist))
    build = upstream_build.UpstreamBuild(spec)
    build.step_cuda_toolkit()
    assert (home / "lib64").resolve() == (home / "lib").resolve()
    assert (home / "lib" / "libcudart.so").resolve() == (home / "lib" / "libcudart.so.13").resolve()
    build.step_cuda_toolkit()  # a re-run keeps the links
    nvcc_version["nvidia-cuda-nvcc"] = "13.5.37"  # what vLLM 0.26.0's own dependencies would bring alone
    with pytest.raises(BuildError, match="nvidia-cuda-nvcc is 13.5.37, not the CUDA 13.0 torch is built with"):
        build.step_cuda_toolkit()
    nvcc_version["nvidia-cuda-nvcc"] = "12.9.86"
    spec["cuda_toolkit"] = {"version": "12.9.1", "parts": ["nvcc"]}
    with pytest.raises(BuildError, match="is not CUDA 12.9"):  # the package says 12.9, the binary says 13.0
        upstream_build.UpstreamBuild(spec).step_cuda_toolkit()


def test_downloads_say_bytes_rate_and_time_while_they_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    said: list[str] = []
    with upstream_build.download_progress("vLLM 0.26.0's wheel", [tmp_path], every_s=0.05):
        (tmp_path / "part").write_bytes(b"x" * 2_000_000)
        deadline = time.monotonic() + 10  # a loaded machine may run the reporter late: wait for it, not a time
        while len(said) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            said += [s for s in capsys.readouterr().out.splitlines() if s.startswith("==> vLLM 0.26.0's wheel:")]
    assert len(said) >= 3  # while it ran, not only at the end
    assert said[-1].startswith("==> vLLM 0.26.0's wheel: 2.0 MB fetched (") and "MB/s), 0m" in said[-1]


def test_a_failed_build_run_as_the_host_program_says_its_one_line_without_a_traceback(tmp_path: Path) -> None:
    """Run as the host zip runs it (`python -m ... build_runtime SPEC`), the module is `__main__`, a second copy;
    the build classes must raise the BuildError that main() catches (a copy's would end in a traceback)."""
    spec = {
        "kind": "upstream-wheel",
        "name": "t",
        "fingerprint": "f" * 64,
        "runtime": str(tmp_path / "rt"),
        "cache": str(tmp_path / "cache"),
        "python": "python9.99",
        "python_version": "9.99",
    }
    path = tmp_path / "build-spec.json"
    path.write_text(json.dumps(spec))
    result = subprocess.run(
        [*host_scripts.program("build_runtime"), str(path)], capture_output=True, text=True, check=False
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "BUILD FAILED: step venv: python9.99 is not installed" in out and "Traceback" not in out, out
