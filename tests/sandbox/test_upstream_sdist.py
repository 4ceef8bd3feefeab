"""The upstream kind's stand-in sdist (tests/sandbox/fixtures/pkg_index/sdist.py) and the build its setup.py does
(the stand-in fork's setup.py with the release's standin_build.json). No sandbox machine and no index: the
sources are the forge's repositories published into a scratch directory, the build runs in a throwaway venv
that holds only setuptools (PyPI's wheel from the sandbox's cache), with a stand-in nvcc 12.9.

What they are checked against: vLLM 0.26.0's sdist as read (tests/STANDIN_SOURCES.md, "upstream kind", sdist rows).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.sandbox.fixtures import forge
from tests.sandbox.fixtures.nvidia_repo import catalog
from tests.sandbox.fixtures.pkg_index import realwheels, sdist, upstream

SOURCES = {  # variable -> (repo, ref, path inside the checkout)
    "VLLM_CUTLASS_SRC_DIR": (forge.CUTLASS, forge.CUTLASS_TAG, ""),
    "TRITON_KERNELS_SRC_DIR": (forge.TRITON, forge.TRITON_TAG_UPSTREAM, "python/triton_kernels/triton_kernels"),
    "DEEPGEMM_SRC_DIR": (forge.DEEPGEMM, "main", ""),
    "FMHA_SM100_SRC_DIR": (forge.MSA, "main", ""),
    "FLASH_MLA_SRC_DIR": (forge.FLASHMLA, "main", ""),
    "QUTLASS_SRC_DIR": (forge.QUTLASS, "main", ""),
    "TML_FA4_SRC_DIR": (forge.TML_FA4, "main", ""),
    "VLLM_FLASH_ATTN_SRC_DIR": (forge.FLASH_ATTN, "main", ""),
}


def _extract(data: bytes, dest: Path) -> Path:
    """The sdist unpacked as the deploy unpacks it: every member a plain file under the top folder."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert all(m.isfile() and m.name.startswith(f"{sdist.TOP}/") for m in tar.getmembers())
        tar.extractall(dest, filter="data")
    return dest / sdist.TOP


@pytest.fixture(scope="module")
def built() -> bytes:
    return sdist.build()


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A checkout of every stand-in source at the ref 0.26.0 pins, by the variable that names it."""
    root = tmp_path_factory.mktemp("forge")
    forge.publish(root / "www")
    found = {}
    for var, (repo, ref, sub) in SOURCES.items():
        checkout = root / "src" / repo
        bare = root / "www" / "git" / f"{repo}.git"
        subprocess.run(
            ["git", "-c", "advice.detachedHead=false", "clone", "-q", "--branch", ref, str(bare), str(checkout)],
            check=True,
        )
        found[var] = str(checkout / sub)
    return found


@pytest.fixture(scope="module")
def cuda_home(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CUDA_HOME whose bin/nvcc answers `-V` as the stand-in CUDA 12.9 toolkit's does."""
    home = tmp_path_factory.mktemp("cuda")
    nvcc = home / "bin" / "nvcc"
    nvcc.parent.mkdir()
    values = {
        "nvcc_version": catalog.CUDA_NVCC_VERSION,
        "release": "12.9",
        "built_on": catalog.NVCC_BUILT_ON,
        "build": catalog.NVCC_BUILD,
    }
    text = upstream.NVCC_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    nvcc.write_text(text)
    nvcc.chmod(0o755)
    return str(home)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with setuptools only (the index's release, from the cache): no index is reachable from the build."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    wheel = next(w.path for w in realwheels.ensure_lane(("build-tools",)) if w.filename.startswith("setuptools-"))
    subprocess.run([str(root / "bin" / "pip"), "install", "-q", "--no-index", str(wheel)], check=True)
    return root


def _env(cuda_home: str, sources: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PIP_"))}
    env.update(sources)
    env.update(
        CUDA_HOME=cuda_home,
        TORCH_CUDA_ARCH_LIST="7.5",
        MAX_JOBS="2",
        NVCC_THREADS="1",
        CMAKE_ARGS="-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
        VLLM_STANDIN_BUILD_SECONDS="0",
        VLLM_STANDIN_KNOBS="/nonexistent/sandbox-knobs.json",  # the defaults
        PIP_NO_INDEX="1",
        PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".cargo" not in p),  # no Rust, as a box
    )
    env.update(extra)
    return env


def test_the_sdist_is_the_same_bytes_every_time(built: bytes) -> None:
    assert hashlib.sha256(sdist.build()).hexdigest() == hashlib.sha256(built).hexdigest()


def test_the_sdist_carries_the_release_files(built: bytes, tmp_path: Path) -> None:
    tree = _extract(built, tmp_path)
    assert "Version: 0.26.0" in (tree / "PKG-INFO").read_text()
    assert "commit_id = 'gf2654939e'" in (tree / "vllm" / "_version.py").read_text()
    cuda = (tree / "requirements" / "cuda.txt").read_text().splitlines()
    for pin in ("torch==2.11.0", "torchaudio==2.11.0", "torchvision==0.26.0", "flashinfer-python==0.6.14"):
        assert pin in cuda
    assert "setuptools-rust" not in (tree / "pyproject.toml").read_text().split("requires = [", 1)[1]


def test_the_sm75_patch_applies_to_the_extracted_tree(built: bytes, tmp_path: Path) -> None:
    tree = _extract(built, tmp_path)
    patch = tmp_path / "sm75.patch"
    patch.write_bytes(upstream.sm75_patch())
    proc = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_tree_installs_with_no_index(
    built: bytes, sources: dict[str, str], cuda_home: str, venv: Path, tmp_path: Path
) -> None:
    tree = _extract(built, tmp_path)
    patch = tmp_path / "sm75.patch"
    patch.write_bytes(upstream.sm75_patch())
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    pip = [str(venv / "bin" / "pip"), "install", "-v", "--no-index", "--no-build-isolation", "--no-deps", str(tree)]
    proc = subprocess.run(pip, env=_env(cuda_home, sources), capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "can't find Rust compiler" in proc.stdout + proc.stderr  # pip -v relays the build's output
    code = (
        "import importlib.metadata, json, vllm, vllm._C_stable_libtorch, vllm._moe_C_stable_libtorch;"
        "print(json.dumps([importlib.metadata.version('vllm'), vllm.__commit__, vllm.__file__]))"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd="/", capture_output=True, text=True)
    version, commit, init = json.loads(out.stdout)
    assert (version, commit) == ("0.26.0+cu129", "gf2654939e")
    site = Path(init).parent
    for rel, data in upstream.patched_files().items():  # the patched tree is what got installed
        assert (site.parent / rel).read_bytes() == data
    for rel in ("fmha_sm100/api.py", "fmha_sm100/csrc/sparse_fmha.cu.jinja", "tml_fa4/interface.py"):
        assert (site / "third_party" / rel).is_file()
    assert (site / "third_party" / "triton_kernels" / "matmul_ogs.py").is_file()
    assert not (site / "_C.abi3.so").exists()  # a CUDA build of the release has no legacy _C


def _setup(tree: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "setup.py", *args], cwd=tree, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("missing", "said"),
    [
        ("FMHA_SM100_SRC_DIR", "file INSTALL cannot find"),
        ("DEEPGEMM_SRC_DIR", "Failed to clone repository:\n    'https://github.com/deepseek-ai/DeepGEMM.git'"),
        ("FLASH_MLA_SRC_DIR", "file failed to open for reading"),
        ("VLLM_FLASH_ATTN_SRC_DIR", "ninja: error: unknown target '_vllm_fa2_C'"),
        ("VLLM_CUTLASS_SRC_DIR", "fatal error: cutlass/cutlass.h: No such file or directory"),
    ],
)
def test_a_missing_source_fails_as_the_release_build_does(
    built: bytes, sources: dict[str, str], cuda_home: str, tmp_path: Path, missing: str, said: str
) -> None:
    tree = _extract(built, tmp_path)
    env = _env(cuda_home, {k: v for k, v in sources.items() if k != missing})
    proc = _setup(tree, env, "build_ext", "--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path / "t"))
    assert proc.returncode != 0
    assert said in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("extra", "version"),
    [
        ({}, "0.26.0+cu129"),
        ({"VLLM_MAIN_CUDA_VERSION": "12.9"}, "0.26.0"),
        ({"VLLM_VERSION_OVERRIDE": "0.26.0+sm75"}, "0.26.0+sm75"),
    ],
)
def test_the_version_follows_the_release_rule(
    built: bytes, cuda_home: str, tmp_path: Path, extra: dict[str, str], version: str
) -> None:
    tree = _extract(built, tmp_path)
    proc = _setup(tree, _env(cuda_home, {}, **extra), "--version")
    assert proc.stdout.strip().splitlines()[-1] == version, proc.stderr


def test_a_required_rust_frontend_fails_without_a_rust_compiler(
    built: bytes, sources: dict[str, str], cuda_home: str, tmp_path: Path
) -> None:
    tree = _extract(built, tmp_path)
    env = _env(cuda_home, sources, VLLM_REQUIRE_RUST_FRONTEND="1")
    proc = _setup(tree, env, "build_ext", "--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path / "t"))
    assert proc.returncode != 0
    assert "can't find Rust compiler" in proc.stderr
