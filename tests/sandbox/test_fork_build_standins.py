"""The stand-in fork's FetchContent imitation and its post-build check, without a machine or a server.

- setup.py, like the real CMake with -DFETCHCONTENT_FULLY_DISCONNECTED=ON in CMAKE_ARGS, refuses to build
  when a dependency the arch list makes CMake fetch has no local source (FLASH_MLA_SRC_DIR, ...), and
  builds when each has one;
- tools/validate_runtime_components.py has the real one's interface (OK/FAIL lines, exit 0/1) and checks the
  stand-in's modules: it passes on a complete runtime, and fails only on flashinfer-cubin (which the rig
  never installs, and waives) when that is missing;
- the fork's tools/flashqla_sm75_patches are what vllm_rig/host/runtime_build.py copies into FlashQLA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.fixtures import forge
from tests.sandbox.fixtures.pkg_index import standins
from vllm_rig.host import runtime_build

REPO = Path(__file__).resolve().parents[2]
DISCONNECTED = "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"


rb = runtime_build


def _copy(tree: Path, dest: Path) -> Path:
    forge._copy_tree(tree, dest)
    return dest


def _files(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body if isinstance(body, bytes) else body.encode())
    return root


@pytest.fixture
def toolchain(tmp_path: Path) -> dict[str, str]:
    """A fake CUDA_HOME (nvcc answers --version), nvidia-smi with two 2080 Ti, knobs for a quick build."""
    cuda = _files(tmp_path / "cuda", {"bin/nvcc": "#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n"})
    smi = "".join(f"echo 'GPU {i}: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-{i})'\n" for i in range(2))
    bin_dir = _files(tmp_path / "bin", {"nvidia-smi": "#!/bin/sh\n" + smi})
    for exe in (cuda / "bin" / "nvcc", bin_dir / "nvidia-smi"):
        exe.chmod(0o755)
    knobs = _files(tmp_path, {"knobs.json": json.dumps({"build_seconds": 0})}) / "knobs.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "TORCH_", "CUDA", "CMAKE_", "FLASH"))}
    env.update(
        CUDA_HOME=str(cuda),
        PATH=f"{bin_dir}:{env['PATH']}",
        TORCH_CUDA_ARCH_LIST="7.5",
        VLLM_STANDIN_KNOBS=str(knobs),
    )
    return env


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, str]:
    """Local sources of everything the stand-in's CMake-like build fetches for SM75."""
    root = tmp_path / "deps"
    _files(root, {"cutlass/include/cutlass/cutlass.h": "#pragma once\n", "triton_kernels/__init__.py": ""})
    _files(root, {"flashmla/flash_mla/flash_mla_interface.py": "", "qutlass/qutlass/csrc/bindings.cpp": ""})
    return {
        "VLLM_CUTLASS_SRC_DIR": str(root / "cutlass"),
        "TRITON_KERNELS_SRC_DIR": str(root / "triton_kernels"),
        "FLASH_MLA_SRC_DIR": str(root / "flashmla"),
        "QUTLASS_SRC_DIR": str(root / "qutlass"),
    }


def _build(fork: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
    return subprocess.run(cmd, cwd=fork, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_disconnected_without_a_local_source_refuses_like_cmake(
    tmp_path: Path, toolchain: dict[str, str], sources: dict[str, str]
) -> None:
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    without_mla = {k: v for k, v in sources.items() if k != "FLASH_MLA_SRC_DIR"}
    proc = _build(fork, {**toolchain, **without_mla, "CMAKE_ARGS": DISCONNECTED})
    assert proc.returncode != 0
    assert "dependency flashmla to already be populated" in proc.stderr  # CMP0170 OLD: a warning first
    assert (
        "CMake Error at cmake/external_projects/flashmla.cmake (file):\n  file failed to open for reading"
        in proc.stderr
    )
    assert not list((fork / "vllm").glob("_C*.so"))
    # -DFLASH_MLA_SRC_DIR= in CMAKE_ARGS counts as a local source too (flashmla.cmake reads the variable)
    args = f"{DISCONNECTED} -DFLASH_MLA_SRC_DIR={sources['FLASH_MLA_SRC_DIR']}"
    assert _build(fork, {**toolchain, **without_mla, "CMAKE_ARGS": args}).returncode == 0


def test_connected_it_only_says_what_it_would_fetch(tmp_path: Path, toolchain: dict[str, str]) -> None:
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    proc = _build(fork, toolchain)
    assert proc.returncode == 0, proc.stderr
    assert "-- FetchContent qutlass: would download" in proc.stdout


def test_disconnected_with_every_source_builds_and_records_them(
    tmp_path: Path, toolchain: dict[str, str], sources: dict[str, str]
) -> None:
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    proc = _build(fork, {**toolchain, **sources, "CMAKE_ARGS": DISCONNECTED})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((fork / "vllm" / "_build_env.json").read_text())
    assert record["fetchcontent_disconnected"] is True
    assert record["fetchcontent"] == {
        "cutlass": sources["VLLM_CUTLASS_SRC_DIR"],
        "triton_kernels": sources["TRITON_KERNELS_SRC_DIR"],
        "flashmla": sources["FLASH_MLA_SRC_DIR"],
        "qutlass": sources["QUTLASS_SRC_DIR"],
    }  # vllm-flash-attn and DeepGEMM are not fetched for SM75


def test_an_sm90_build_also_needs_flash_attention_and_deepgemm(
    tmp_path: Path, toolchain: dict[str, str], sources: dict[str, str]
) -> None:
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    proc = _build(fork, {**toolchain, **sources, "CMAKE_ARGS": DISCONNECTED, "TORCH_CUDA_ARCH_LIST": "7.5;9.0"})
    assert proc.returncode != 0 and "ninja: error: unknown target '_vllm_fa2_C'" in proc.stderr


def _knobs(toolchain: dict[str, str], **knobs: object) -> dict[str, str]:
    path = Path(toolchain["VLLM_STANDIN_KNOBS"])
    path.write_text(json.dumps({**json.loads(path.read_text()), **knobs}))
    return toolchain


def test_with_upstreams_cmake_a_withheld_flash_attention_ends_on_the_real_target_error(
    tmp_path: Path, toolchain: dict[str, str], sources: dict[str, str]
) -> None:
    """Upstream 0.21.0's vllm_flash_attn.cmake fetches on SM75 too; disconnected without its source the
    build stops where the real one did (ninja's unknown target); qutlass and DeepGEMM missing only warn."""
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    env = {**_knobs(toolchain, upstream_cmake=True), **sources, "CMAKE_ARGS": DISCONNECTED}
    proc = _build(fork, env)
    assert proc.returncode != 0 and "ninja: error: unknown target '_vllm_fa2_C'" in proc.stderr
    assert not list((fork / "vllm").glob("_C*.so"))
    flash_attn = _files(tmp_path / "fa", {"vllm_flash_attn/__init__.py": ""})
    without_qutlass = {k: v for k, v in env.items() if k != "QUTLASS_SRC_DIR"}
    proc = _build(fork, {**without_qutlass, "VLLM_FLASH_ATTN_SRC_DIR": str(flash_attn)})  # what the deploy supplies
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dependency qutlass to already be populated" in proc.stderr and "deepgemm" in proc.stderr  # warnings


# ---- the post-build check -------------------------------------------------------------------------------


def _site(root: Path, with_cubin: bool) -> Path:
    """torch, flashinfer-python (and flashinfer-cubin) as installed: the stand-in sources plus dist-info."""
    dists = [("torch", "torch", "2.11.0+cu128", "12.8"), ("flashinfer", "flashinfer-python", "0.6.14", None)]
    if with_cubin:
        dists.append(("flashinfer_cubin", "flashinfer-cubin", "0.6.14", None))
    for src, name, version, cuda in dists:
        _files(root, standins.source_tree(src))
        _files(root, standins._version_py(src, version, cuda))
        info = f"{name.replace('-', '_')}-{version}.dist-info"
        _files(root, {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"})
    return root


def _validate(fork: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "tools/validate_runtime_components.py"]  # as build.sh runs it: no arguments
    return subprocess.run(cmd, cwd=fork, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def runtime(tmp_path: Path, toolchain: dict[str, str], sources: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A built stand-in fork, a FlashQLA prepared as vllm_rig/host/runtime_build.py does, and the validate env."""
    fork = _copy(forge.FORK_TREE, tmp_path / "fork")
    assert _build(fork, {**toolchain, **sources, "CMAKE_ARGS": DISCONNECTED}).returncode == 0
    flashqla = _copy(forge.FLASHQLA_TREE, tmp_path / "flashqla")
    changed = rb.prepare_flashqla(flashqla, fork)
    assert "flash_qla/ops/gated_delta_rule/legacy/csrc/gdn_forward.cu from the fork's tools/flashqla_sm75_patches" in (
        changed
    )
    env = {
        **toolchain,
        "VLLM_CUTLASS_SRC_DIR": sources["VLLM_CUTLASS_SRC_DIR"],
        "TRITON_KERNELS_SRC_DIR": sources["TRITON_KERNELS_SRC_DIR"],
        "FLASHQLA_DIR": str(flashqla),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions"),
    }
    return fork, env


def test_validate_passes_on_a_complete_runtime(tmp_path: Path, runtime: tuple[Path, dict[str, str]]) -> None:
    fork, env = runtime
    site = _site(tmp_path / "site", with_cubin=True)
    proc = _validate(fork, {**env, "PYTHONPATH": f"{fork}:{site}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Runtime component validation" and lines[-1] == "Runtime component validation OK"
    assert "OK torch.cuda.device_1: NVIDIA GeForce RTX 2080 Ti sm_75" in lines
    assert "OK torch.ops._C.silu_and_mul: registered" in lines
    assert any(line.startswith("OK FlashQLA.legacy.extension: ") for line in lines)
    assert not [line for line in lines if line.startswith("FAIL ")]
    code = "from flash_qla.ops.gated_delta_rule.legacy import sm_legacy as s; print(s._load_ext().dtypes())"
    got = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": env["FLASHQLA_DIR"]},
        text=True,
        capture_output=True,
        check=False,
    )
    assert got.stdout.strip() == "float16,float32", got.stderr  # the fork's SM75 patch, not float32 only


def test_validate_fails_on_what_is_missing_and_the_rig_waives_only_cubin(
    tmp_path: Path, runtime: tuple[Path, dict[str, str]]
) -> None:
    fork, env = runtime
    site = _site(tmp_path / "site", with_cubin=False)
    proc = _validate(fork, {**env, "PYTHONPATH": f"{fork}:{site}"})
    assert proc.returncode == 1
    assert "FAIL flashinfer-cubin: not-installed" in proc.stdout.splitlines()
    assert "Runtime component validation failed:" in proc.stdout
    waived = rb.judge_validation(proc.returncode, proc.stdout, ["flashinfer-cubin", "flashinfer_cubin"])
    assert [w.split(":", 1)[0] for w in waived] == ["flashinfer-cubin", "flashinfer_cubin"]
    broken = {k: v for k, v in env.items() if k != "FLASHQLA_DIR"}
    proc = _validate(fork, {**broken, "PYTHONPATH": f"{fork}:{site}"})
    with pytest.raises(rb.BuildError, match="FlashQLA.dir: FLASHQLA_DIR is not set"):
        rb.judge_validation(proc.returncode, proc.stdout, ["flashinfer-cubin", "flashinfer_cubin"])
