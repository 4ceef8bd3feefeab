"""The upstream kind's compile build (runtime_kind: upstream, upstream_build: compile): the first box's own way. vLLM's
source archive from PyPI (pinned by its sha256, through pip_index_url), zyYuc's SM75 patch applied to the tree, the
release's requirements under the torch index's CUDA 12 lane (the release's torch pin +cu128: 2.11.0 for 0.26.0,
2.13.0 for 0.27.1, installed as the fork kind installs it), FlashInfer at the release's pin with its SM75 fix,
FlashQLA with the owner's patch off the resolver, then the compile for gpu_compute_capability with the card's CUDA
toolkit and every source the release's CMake would fetch checked out ahead (FetchContent disconnected). The service's
CUDA_HOME is the card's toolkit, as the first seed's unit.

Why CUDA 12: torch's cpp_extension refuses an nvcc whose major version differs from torch's CUDA, and the card's toolkit
is 12.9; PyPI's torch 2.11.0 and 2.13.0 are CUDA 13 builds, the torch index's cu128 lane a CUDA 12 one.
"""

from __future__ import annotations

from typing import Any

from vllm_rig.known import upstream_compile, upstream_releases
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds.base import FLASHINFER, GitSources, RuntimeKind
from vllm_rig.stages.runtime.lanes import (
    TORCH_LANE_PACKAGES,
    fetched_for,
    lane_word,
    torch_exact_versions,
    torch_lane,
)


def pins(s: Settings) -> dict[str, str]:
    """Exact versions the runtime ends with: the release's own torch and FlashInfer pins (validation holds the
    settings to them), triton at torch's pin."""
    return {**s.vllm_wheel().pins(), "triton": s.triton_version}


def needed_sources(s: Settings) -> dict[str, dict[str, Any]]:
    """The CMake sources a build for gpu_compute_capability fetches (0.26.0's eight, 0.27.1's nine: all of them)."""
    arch = s.gpu_compute_capability
    return {name: e for name, e in sorted(s.compile_sources().items()) if fetched_for(e, arch)}


class UpstreamCompile(RuntimeKind):
    name = "upstream-compile"
    lock_tree = "sdist"  # the release's source archive, from the index

    def build_inputs(self, s: Settings, fix: dict[str, Any] | None) -> dict[str, Any]:
        patches = s.sm75_patches()
        return {
            "kind": self.name,
            "python": s.python_version,
            "vllm": s.vllm_version,
            "vllm_sdist_sha256": s.vllm_sdist_hash(),
            "cuda": s.cuda_version,
            "arch_list": s.gpu_compute_capability,
            "pins": pins(s),
            "torch_lane": torch_lane(s.torch_index_url),
            "lane_extras": upstream_compile.CUDA12_EXTRAS,
            "sm75_patch": patches["vllm"]["sha256"],
            "flashqla": s.flashqla_ref,
            "flashqla_patch": patches["flashqla"]["sha256"],
            "flashinfer_fix": fix,
            "sources": {name: e["ref"] for name, e in needed_sources(s).items()},
        }

    def git_sources(self, s: Settings, dirs: RuntimeDirs) -> GitSources:
        """FlashQLA and every source the release's CMake would fetch, checked out ahead."""
        prefix = s.git_mirror_prefix
        cmake = [
            (f"{name} (vLLM {s.vllm_version}'s CMake)", prefix + e["repo"], e["ref"], dirs.dep(name))
            for name, e in needed_sources(s).items()
        ]
        return [("FlashQLA", prefix + s.flashqla_repo, s.flashqla_ref, dirs.flashqla), *cmake]

    def spec_part(self, s: Settings, dirs: RuntimeDirs) -> dict[str, Any]:
        """What the host build script's compile steps read (vllm_rig/host/upstream_compile.py)."""
        sdist = s.vllm_sdist()
        by_variable = {
            name: {"env": e["env"], "dir": dirs.dep(name)}
            for name, e in needed_sources(s).items()
            if name not in upstream_compile.REQUIRED_SOURCES  # handed over by the compile's own two variables
        }
        return {
            "kernel_modules": list(upstream_releases.KERNEL_MODULES),
            "vllm_sdist": {
                "version": s.vllm_version,
                "sha256": s.vllm_sdist_hash(),
                "filename": sdist.filename,
                # What importlib.metadata.version("vllm") says after the compile: setup.py adds the CUDA it built with.
                "expected_version": upstream_compile.local_version(s.vllm_version, s.cuda_version),
            },
            "build_requires": list(sdist.build_requires),
            "pins": pins(s),
            "overrides": {},
            "replace": [FLASHINFER],
            "lane_extras": upstream_compile.CUDA12_EXTRAS,
            "torch_packages": list(TORCH_LANE_PACKAGES),
            "torch_exact": torch_exact_versions(s),
            "torch_index_url": s.torch_index_url,
            "arch_list": s.gpu_compute_capability,
            "sm75_patches": s.sm75_patches(),
            "patch_status": s.vllm_wheel().patch,
            "sources": {
                "vllm": dirs.fork,
                "flashqla": dirs.flashqla,
                "cutlass": dirs.dep(upstream_compile.CUTLASS),
                "triton": dirs.dep(upstream_compile.TRITON_KERNELS),
            },
            "fetchcontent": by_variable,
        }

    def lock_name(self, s: Settings, digest_py: str) -> str:
        return f"upstream-compile-{s.vllm_version}-{lane_word(s)}-{digest_py}.txt"

    def lock_what(self, s: Settings) -> str:
        lane = torch_lane(s.torch_index_url)
        return f"vLLM {s.vllm_version} compiled on the torch lane {lane}, Python {s.python_version}"

    def sources_label(self, s: Settings) -> str:
        return f"SM75 patch set, FlashQLA and vLLM {s.vllm_version}'s CMake sources at their pins"

    def build_label(self, s: Settings, name: str, jobs: int) -> str:
        return (
            f"Build runtime {name}: vLLM {s.vllm_version}'s source archive with the SM75 patch "
            f"(MAX_JOBS={jobs}, TORCH_CUDA_ARCH_LIST={s.gpu_compute_capability}, CUDA {s.cuda_version})"
        )


KIND = UpstreamCompile()
