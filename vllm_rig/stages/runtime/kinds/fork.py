"""The fork kind (runtime_kind: fork): weicj's SM75 vLLM fork compiled at fork_ref with the pinned torch stack from
the torch index's lane, FlashInfer with its SM75 fix, FlashQLA, CUTLASS, Triton's kernels and every source the
fork's CMake would fetch checked out ahead. The host build: vllm_rig/host/runtime_build.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_rig.known import fork_lines, server_interface
from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds.base import FLASHINFER, GitSources, RuntimeKind
from vllm_rig.stages.runtime.lanes import (
    TORCH_LANE_PACKAGES,
    fetched_for,
    lane_word,
    torch_exact_versions,
    torch_lane,
)


def runtime_pins(s: Settings) -> dict[str, str]:
    """Exact versions the runtime must end up with (pip name -> version)."""
    return {
        "torch": s.torch_version,
        "torchvision": s.torchvision_version,
        "torchaudio": s.torchaudio_version,
        "triton": s.triton_version,
        "transformers": s.transformers_version,
        "numpy": s.numpy_version,
        FLASHINFER: s.flashinfer_version,
    }


def fetchcontent_deps(s: Settings) -> dict[str, Mapping[str, Any]]:
    """The fetchcontent_sources entries the compile for s.gpu_compute_capability needs."""
    return {n: e for n, e in sorted(s.fetchcontent_sources.items()) if fetched_for(e, s.gpu_compute_capability)}


class Fork(RuntimeKind):
    name = "fork"

    def build_inputs(self, s: Settings, fix: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "cuda": s.cuda_version,
            "python": s.python_version,
            "arch_list": s.gpu_compute_capability,
            "torch": s.torch_version,
            "torchvision": s.torchvision_version,
            "torchaudio": s.torchaudio_version,
            "torch_lane": torch_lane(s.torch_index_url),
            "triton": s.triton_version,
            "transformers": s.transformers_version,
            "numpy": s.numpy_version,
            "fork": s.fork_ref,
            "flashqla": s.flashqla_ref,
            "cutlass": s.cutlass_ref,
            "triton_src": s.triton_src_ref,
            "flashinfer": s.flashinfer_version,
            "requirement_overrides": s.requirement_overrides(),
            "flashinfer_fix": fix,
            "fetchcontent": {name: e["ref"] for name, e in fetchcontent_deps(s).items()},
        }

    def git_sources(self, s: Settings, dirs: RuntimeDirs) -> GitSources:
        prefix = s.git_mirror_prefix
        return [
            ("vLLM fork", prefix + s.fork_repo, s.fork_ref, dirs.fork),
            ("FlashQLA", prefix + s.flashqla_repo, s.flashqla_ref, dirs.flashqla),
            ("CUTLASS", prefix + s.cutlass_repo, s.cutlass_ref, dirs.cutlass),
            ("Triton (triton_kernels)", prefix + s.triton_src_repo, s.triton_src_ref, dirs.triton),
            *(
                (f"{name} (FetchContent)", prefix + e["repo"], e["ref"], dirs.dep(name))
                for name, e in fetchcontent_deps(s).items()
            ),
        ]

    def spec_part(self, s: Settings, dirs: RuntimeDirs) -> dict[str, Any]:
        return {
            "arch_list": s.gpu_compute_capability,
            "pins": runtime_pins(s),
            "overrides": s.requirement_overrides(),
            "replace": [FLASHINFER, *s.requirement_overrides()],
            "torch_packages": list(TORCH_LANE_PACKAGES),
            "torch_exact": torch_exact_versions(s),
            "torch_index_url": s.torch_index_url,
            "sources": {"fork": dirs.fork, "flashqla": dirs.flashqla, "cutlass": dirs.cutlass, "triton": dirs.triton},
            "fork_ref": s.fork_ref,
            "fetchcontent": {  # each fetched-ahead source's variable and checkout directory
                name: {"env": e["env"], "dir": dirs.dep(name)} for name, e in fetchcontent_deps(s).items()
            },
            # Checks of the fork's validate_runtime_components.py the rig's own choices fail: it requires
            # flashinfer-cubin (the distribution and its module), one of DROPPED_PACKAGES.
            "validate_waive": ["flashinfer-cubin", "flashinfer_cubin"],
        }

    def lock_name(self, s: Settings, digest_py: str) -> str:
        return f"fork-{s.fork_ref[:12]}-{lane_word(s)}-{digest_py}.txt"

    def lock_what(self, s: Settings) -> str:
        lane = torch_lane(s.torch_index_url)
        return f"the fork at {s.fork_ref[:12]} on the torch lane {lane}, Python {s.python_version}"

    def working_directory(self, layout: Layout) -> str:
        return layout.fork_src  # the fork's source tree: its editable install

    def sources_label(self, s: Settings) -> str:
        return "Fork, FlashQLA, CUTLASS, Triton and the FetchContent sources at their pins"

    def build_label(self, s: Settings, name: str, jobs: int) -> str:
        return f"Build runtime {name} (MAX_JOBS={jobs}, TORCH_CUDA_ARCH_LIST={s.gpu_compute_capability})"

    def label(self, s: Settings) -> str:
        return f"fork {s.fork_ref[:12]}"

    def capability_line(self, s: Settings) -> str:
        return f"runtime_kind fork (the SM75 fork, {s.fork_ref[:12]}) is built for compute capability"

    def line_notes(self, s: Settings) -> list[str]:
        ours = fork_lines.LINES.get(s.fork_release_line)
        if ours is None:
            line = s.fork_release_line
            return [f"line: the fork's {line} line at fork_ref {s.fork_ref[:12]} (not one the rig knows)"]
        return [
            f"line: the fork's {ours.line}.x line at fork_ref {s.fork_ref[:12]} ({ours.base} base, CUDA "
            f"{ours.cuda}, torch {ours.torch}, latest release {ours.latest}): {ours.status}"
        ]

    def fork_line(self, s: Settings) -> str | None:
        return s.fork_release_line

    def not_the_fork(self, s: Settings) -> str | None:
        return None

    def server(self, s: Settings) -> server_interface.ServerInterface:
        return server_interface.FORK


KIND = Fork()
