"""The upstream runtime kind's plan: vLLM's release wheel at an exact version (its own compiled kernels,
sm_75 among them), zyYuc's SM75 patch applied to the installed Python files, FlashInfer at the release's
own pin with the SM75 fix the version table says, FlashQLA with the owner's patch off the resolver (on
PYTHONPATH, as the first seed's unit has it), and the CUDA 13.0 toolkit torch itself pins for what
compiles on the box (FlashInfer's JIT, FlashQLA's extension). No compile of vLLM, no CUTLASS, no ccache.

The CUDA lane: PyPI's torch 2.11.0 is a CUDA 13.0 build (its METADATA requires
cuda-toolkit[...]==13.0.2) and the vLLM wheel's kernels need libcudart.so.13; torch's cpp_extension
refuses an nvcc of another major version, so the card's CUDA 12.9 cannot compile for this torch. The
same cuda-toolkit release's nvcc, crt, cccl, cudart and nvvm parts, installed from PyPI into the venv
(nvidia/cu13/), are that toolkit: nvcc 13.0.88, which builds sm_75. Driver 580 runs CUDA 13.
"""

from __future__ import annotations

from typing import Any

from vllm_rig.known import cuda_toolkit, upstream_releases
from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import upstream_compile

KIND = "upstream-wheel"
CUDA_TOOLKIT = cuda_toolkit.DISTRIBUTION
CUDA_TOOLKIT_PARTS = cuda_toolkit.PARTS
TORCH_PACKAGES = ("torch", "torchvision", "torchaudio")


def cuda_toolkit_version(torch: str) -> str:
    try:
        return cuda_toolkit.FOR_TORCH[torch]
    except KeyError:
        raise ValueError(f"no CUDA toolkit is known for PyPI's torch {torch}") from None


def cuda_home(venv: str, python_version: str) -> str:
    """Where the cuda-toolkit wheels put the toolkit inside a venv."""
    return f"{venv}/lib/python{python_version}/site-packages/nvidia/cu13"


def service_cuda_home(s: Settings, layout: Layout) -> str:
    """CUDA_HOME of the service: the toolkit in the current runtime's venv (wheel), the card's (compile)."""
    if s.upstream_build == "compile":
        return s.cuda_home
    return cuda_home(f"{layout.current}/venv", s.python_version)


def pins(s: Settings) -> dict[str, str]:
    r = s.vllm_wheel()
    return {"vllm": r.version, **r.pins(), CUDA_TOOLKIT: cuda_toolkit_version(r.torch)}


def wheel_sha256(s: Settings) -> str:
    return s.vllm_wheel_sha256 or s.vllm_wheel().sha256


def build_inputs(s: Settings, fix: dict[str, Any] | None) -> dict[str, Any]:
    """Everything that changes what an upstream runtime holds (bytes, not where they come from). Its hash
    names the runtime."""
    if s.upstream_build == "compile":
        return upstream_compile.build_inputs(s, fix)
    r = s.vllm_wheel()
    patches = s.sm75_patches()
    return {
        "kind": KIND,
        "python": s.python_version,
        "vllm": r.version,
        "vllm_wheel_sha256": wheel_sha256(s),
        "pins": pins(s),
        "torch_lane": f"PyPI (CUDA toolkit {cuda_toolkit_version(r.torch)})",
        "sm75_patch": patches["vllm"]["sha256"],
        "flashqla": s.flashqla_ref,
        "flashqla_patch": patches["flashqla"]["sha256"],
        "flashinfer_fix": fix,
    }


def git_sources(s: Settings, dirs: RuntimeDirs) -> list[tuple[str, str, str, str]]:
    """FlashQLA only: the patches are single files, downloaded whole and checked by sha256 (compile: and the
    sources the release's CMake fetches)."""
    if s.upstream_build == "compile":
        return upstream_compile.git_sources(s, dirs)
    return [("FlashQLA", s.git_mirror_prefix + s.flashqla_repo, s.flashqla_ref, dirs.flashqla)]


def spec_part(s: Settings, dirs: RuntimeDirs) -> dict[str, Any]:
    """What the host build script's upstream steps read."""
    if s.upstream_build == "compile":
        return upstream_compile.spec_part(s, dirs)
    r = s.vllm_wheel()
    return {
        "kind": KIND,
        "kernel_modules": list(upstream_releases.KERNEL_MODULES),
        "vllm_wheel": {"sha256": wheel_sha256(s), "version": r.version},
        "pins": pins(s),
        "torch_packages": list(TORCH_PACKAGES),
        "torch_exact": {name: pins(s)[name] for name in TORCH_PACKAGES},  # PyPI's: no local version
        "cuda_toolkit": {"version": cuda_toolkit_version(r.torch), "parts": list(CUDA_TOOLKIT_PARTS)},
        "cuda_home": cuda_home(f"{dirs.dir}/venv", s.python_version),
        "sm75_patches": s.sm75_patches(),
        "patch_status": r.patch,
        "sources": {"flashqla": dirs.flashqla},
    }
