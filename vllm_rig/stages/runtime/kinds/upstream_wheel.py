"""The upstream kind's wheel build (runtime_kind: upstream, upstream_build: wheel): vLLM's release wheel at an exact
version (its own compiled kernels, sm_75 among them), zyYuc's SM75 patch applied to the installed Python files,
FlashInfer at the release's own pin with the SM75 fix the version table says, FlashQLA with the owner's patch off the
resolver (on PYTHONPATH, as the first seed's unit has it), and the CUDA 13.0 toolkit torch itself pins for what
compiles on the box (FlashInfer's JIT, FlashQLA's extension). No compile of vLLM, no CUTLASS, no ccache.

The CUDA lane: PyPI's torch 2.11.0 is a CUDA 13.0 build (its METADATA requires cuda-toolkit[...]==13.0.2) and the vLLM
wheel's kernels need libcudart.so.13; torch's cpp_extension refuses an nvcc of another major version, so the card's CUDA
12.9 cannot compile for this torch. The same cuda-toolkit release's nvcc, crt, cccl, cudart and nvvm parts, installed
from PyPI into the venv (nvidia/cu13/), are that toolkit: nvcc 13.0.88, which builds sm_75. Driver 580 runs CUDA 13.
"""

from __future__ import annotations

from typing import Any

from vllm_rig.known import cuda_toolkit, upstream_releases
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds.base import FLASHINFER, WHEEL_DISK, GitSources, RuntimeKind

TORCH_PACKAGES = ("torch", "torchvision", "torchaudio")


def cuda_toolkit_version(torch: str) -> str:
    try:
        return cuda_toolkit.FOR_TORCH[torch]
    except KeyError:
        raise ValueError(f"no CUDA toolkit is known for PyPI's torch {torch}") from None


def pins(s: Settings) -> dict[str, str]:
    r = s.vllm_wheel()
    return {"vllm": r.version, **r.pins(), cuda_toolkit.DISTRIBUTION: cuda_toolkit_version(r.torch)}


def wheel_sha256(s: Settings) -> str:
    return s.vllm_wheel_sha256 or s.vllm_wheel().sha256


class UpstreamWheel(RuntimeKind):
    name = "upstream-wheel"
    disk = WHEEL_DISK
    lock_tree = None  # the release's wheel: its METADATA's pins are the set, no source tree

    def build_inputs(self, s: Settings, fix: dict[str, Any] | None) -> dict[str, Any]:
        r = s.vllm_wheel()
        patches = s.sm75_patches()
        return {
            "kind": self.name,
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

    def git_sources(self, s: Settings, dirs: RuntimeDirs) -> GitSources:
        """FlashQLA only: the patches are single files, downloaded whole and checked by sha256."""
        return [("FlashQLA", s.git_mirror_prefix + s.flashqla_repo, s.flashqla_ref, dirs.flashqla)]

    def spec_part(self, s: Settings, dirs: RuntimeDirs) -> dict[str, Any]:
        """What vllm_rig/host/upstream_build.py reads."""
        r = s.vllm_wheel()
        return {
            "kernel_modules": list(upstream_releases.KERNEL_MODULES),
            "vllm_wheel": {"sha256": wheel_sha256(s), "version": r.version},
            "pins": pins(s),
            "torch_packages": list(TORCH_PACKAGES),
            "torch_exact": {name: pins(s)[name] for name in TORCH_PACKAGES},  # PyPI's: no local version
            "cuda_toolkit": {"version": cuda_toolkit_version(r.torch), "parts": list(cuda_toolkit.PARTS)},
            "sm75_patches": s.sm75_patches(),
            "patch_status": r.patch,
            "sources": {"flashqla": dirs.flashqla},
        }

    def lock_name(self, s: Settings, digest_py: str) -> str:
        return f"upstream-wheel-{s.vllm_version}-{digest_py}.txt"

    def lock_what(self, s: Settings) -> str:
        return f"vLLM {s.vllm_version}'s release wheel on Python {s.python_version}"

    def lock_requirements(self, spec: dict[str, Any], tree_lines: list[str]) -> list[str]:
        toolkit, spec_pins = spec["cuda_toolkit"], spec["pins"]
        names = ["vllm", *spec["torch_packages"], FLASHINFER]
        parts = ",".join(toolkit["parts"])
        return [*(f"{n}=={spec_pins[n]}" for n in names), f"cuda-toolkit[{parts}]=={toolkit['version']}"]

    def cuda_home(self, s: Settings, runtime: str) -> str:
        """The CUDA 13.0 toolkit the cuda-toolkit wheels put in the runtime's venv: PyPI's torch is built with it."""
        return f"{runtime}/venv/lib/python{s.python_version}/site-packages/nvidia/cu13"

    def sources_label(self, s: Settings) -> str:
        return "SM75 patch set and FlashQLA at their pins"

    def build_label(self, s: Settings, name: str, jobs: int) -> str:
        return f"Runtime {name}: vLLM {s.vllm_version}'s release wheel with the SM75 patch (no compile)"


KIND = UpstreamWheel()
