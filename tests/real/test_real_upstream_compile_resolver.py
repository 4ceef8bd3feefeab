"""pip's real resolver on what upstream_build compile installs for each recorded release (vLLM 0.26.0, 0.27.1):
the torch lane's pins, the release's build requirements (vllm_rig/known/upstream_compile.py), and the release's own
requirement files (read from PyPI's vllm-V.tar.gz into
tests/sandbox/fixtures/pkg_index/upstream/vllm-V-sdist-requirements.json) merged the way the host build merges them
(its own functions: requirement_lines, relane, merge_requirements). Needs PyPI.

As tests/real/real_pip.py says: the torch index's local versions (2.11.0+cu128, 2.13.0+cu128) are not on PyPI, so
torch resolves as PyPI's release of the same public version; a real box takes the cu128 build from the torch index.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.real import real_pip
from tests.unit.groupdata import compile_sources, profile_data
from vllm_rig.host import runtime_build
from vllm_rig.known import upstream_compile
from vllm_rig.settings import Settings
from vllm_rig.validation import load_settings

UPSTREAM = Path(__file__).resolve().parents[1] / "sandbox/fixtures/pkg_index/upstream"

# What each release's settings must hold beyond the profile (the release's own pins; triton at its torch's pin,
# which settings do not derive: docs/upstream-facts.md section 4), and what the resolver must pick.
RELEASES: dict[str, dict[str, Any]] = {
    # 0.26.0's FlashInfer (0.6.14 + PR 3621) serves FP16 KV only: the catalogue's FP8-KV entries left out
    "0.26.0": {
        "settings": {"kv_cache_dtype": "auto", "models": {}},
        "pins": {"torch": "2.11.0", "flashinfer-python": "0.6.14", "triton": "3.6.0"},
    },
    "0.27.1": {
        "settings": {},  # null pins: the release's own (torch 2.13.0's triton 3.7.1 among them)
        "pins": {"torch": "2.13.0", "flashinfer-python": "0.6.16.post3", "triton": "3.7.1", "quack-kernels": "0.6.1"},
    },
}


def _settings(version: str) -> Settings:
    sources = compile_sources(version)  # triton v3.5.1's commit is not recorded: the host names it
    changes = {"vllm_version": version, "upstream_compile_sources": sources, **RELEASES[version]["settings"]}
    return load_settings({**profile_data(), "runtime_kind": "upstream", "upstream_build": "compile", **changes})


def _tree(version: str, root: Path) -> Path:
    """The release's requirement files laid out as in its source tree."""
    real = UPSTREAM / f"vllm-{version}-sdist-requirements.json"
    for rel, lines in json.loads(real.read_text())["requirements"].items():
        path = root / "requirements" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return root


def compile_requirements(s: Settings, tree: Path) -> list[str]:
    """The lane and the release's lines merged as the build merges them (real_pip's, with the cu13 extras swapped
    as the compile swaps them), after the archive's build requirements."""
    lines = runtime_build.relane(real_pip.fork_requirement_lines(tree), upstream_compile.CUDA12_EXTRAS)
    return [*s.vllm_sdist().build_requires, *real_pip.runtime_requirements(s, lines)]


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_the_compile_set_resolves_with_the_lanes_cuda_12_variants(version: str, tmp_path: Path) -> None:
    s = _settings(version)
    wanted = compile_requirements(s, _tree(version, tmp_path))
    assert "humming-kernels[cu12]==0.1.10" in wanted and "nvidia-cutlass-dsl==4.6.0" in wanted
    assert not [line for line in wanted if "cu13" in line], wanted
    result = real_pip.resolve(wanted, s.python_version)
    assert result.ok, f"pip cannot install vLLM {version}'s compile set:\n{result.output[-3000:]}"
    got = result.installs
    for name, pin in {**RELEASES[version]["pins"], "humming-kernels": "0.1.10"}.items():
        assert got.get(name) == pin, f"{name}: resolved {got.get(name)}, pinned {pin}"
    assert "nvidia-cutlass-dsl-libs-cu12" in got and "nvidia-cutlass-dsl-libs-cu13" not in got
    assert "nvidia-cuda-nvcc-cu12" in got  # humming-kernels[cu12]'s own toolkit parts
    assert "flashinfer-cubin" not in got and "setuptools-rust" in got


def test_every_recorded_release_is_resolved_here() -> None:
    assert set(RELEASES) == set(upstream_compile.SDISTS)


@pytest.mark.parametrize("version", sorted(RELEASES))
@pytest.mark.parametrize("package", ["humming-kernels", "nvidia-cutlass-dsl"])
def test_each_swapped_package_is_a_cuda_13_extra_of_the_release(version: str, package: str, tmp_path: Path) -> None:
    """The swap table names only what the release's files ask with a cu13 extra: a release that stops asking
    for it makes this fail, and the table must follow."""
    lines = runtime_build.requirement_lines(_tree(version, tmp_path) / "requirements" / "cuda.txt")
    assert any(line.startswith(f"{package}[cu13]") for line in lines), lines


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_only_the_swapped_packages_ask_for_cuda_13_extras(version: str, tmp_path: Path) -> None:
    """No other line of the release's files names a cu13 extra the swap would miss."""
    tree = _tree(version, tmp_path)
    lines = [
        line
        for name in ("cuda.txt", "common.txt")
        for line in runtime_build.requirement_lines(tree / "requirements" / name)
    ]
    asking = {line.split("[", 1)[0] for line in lines if "[cu13" in line.replace(" ", "")}
    assert asking == set(upstream_compile.CUDA12_EXTRAS), lines
