"""The face every runtime kind shows the control side: what it builds from (inputs, fingerprint, sources), its hashed
lock (name, what it is for, how it is made), what the host build program reads (vllm_rig/host/build_runtime.py's
kind of the same name), the preflight rule that differs by kind, the service unit's toolkit, working directory and
server interface, and the words a run says about it. Where a method has a body, it is the upstream kinds' (vLLM's
release with zyYuc's SM75 patch, wheel or compiled): the fork overrides it. Its settings rules are
settings.KIND_RULES: settings are checked before any stage is imported, a floor below this one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from vllm_rig.host import runtime_build
from vllm_rig.known import server_interface, upstream_releases
from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings

GitSources = list[tuple[str, str, str, str]]  # (label, url, ref, checkout dir), mirror prefix applied

# Packages a vLLM tree's requirements may name that never go into a runtime: flashinfer-jit-cache's AOT kernels
# bypass the patched headers, and flashinfer-cubin holds no SM75 kernels (and is not published for every FlashInfer
# release).
DROPPED_PACKAGES = ("flashinfer-cubin", "flashinfer-jit-cache")
FLASHINFER = "flashinfer-python"

# Free disk a deploy needs when min_free_disk_gb is unset, by what the kind builds (preflight).
COMPILE_DISK_GB = 110  # a compile's tree and caches (~80) and the model (~29)
WHEEL_DISK_GB = 40  # the upstream kind's wheels (~4), the model (~29) and room for a second runtime's wheels
COMPILE_DISK = (COMPILE_DISK_GB, "a compile (~80) and the model (~29)")
WHEEL_DISK = (WHEEL_DISK_GB, "the upstream wheels (~4) and the model (~29)")


class RuntimeKind(ABC):
    name = ""  # Settings.runtime's value, and the host build program's kind
    disk = COMPILE_DISK
    lock_tree: str | None = "fork"  # whose requirement files the lock resolves: "fork", "sdist" (PyPI's), None

    @abstractmethod  # everything that changes what the runtime holds (bytes, not where they come from): its name
    def build_inputs(self, s: Settings, fix: dict[str, Any] | None) -> dict[str, Any]: ...

    @abstractmethod
    def git_sources(self, s: Settings, dirs: RuntimeDirs) -> GitSources: ...

    @abstractmethod  # what the host build program's steps for this kind read, beside every kind's part of the spec
    def spec_part(self, s: Settings, dirs: RuntimeDirs) -> dict[str, Any]: ...

    @abstractmethod  # `digest_py` is "<digest of the lock's inputs>-py<Python>"
    def lock_name(self, s: Settings, digest_py: str) -> str: ...

    @abstractmethod
    def lock_what(self, s: Settings) -> str: ...

    def lock_requirements(self, spec: dict[str, Any], tree_lines: list[str]) -> list[str]:
        """What the lock resolves, from the build spec: a compiled kind's torch lane, build requirements and the
        source tree's lines merged with the pins as the host build merges them."""
        pins, exact = spec["pins"], spec["torch_exact"]
        lane = [f"{n}=={exact.get(n, pins[n])}" for n in spec["torch_packages"]]
        build = list(spec.get("build_requires", []))
        lines = runtime_build.relane(tree_lines, spec.get("lane_extras", {}))
        merged = runtime_build.merge_requirements(lines, pins, spec["overrides"], spec["replace"], spec["drop"])
        return lane + build + merged

    def cuda_home(self, s: Settings, runtime: str) -> str:
        """The CUDA toolkit a runtime at `runtime` builds with and its server's JIT compiles with: the card's, for a
        compiled kind."""
        return s.cuda_home

    def working_directory(self, layout: Layout) -> str:
        return layout.current  # the runtime itself: no vllm/ there to shadow the installed package

    def server(self, s: Settings) -> server_interface.ServerInterface:
        return server_interface.upstream(s.vllm_version)  # what the server accepts on its command line

    @abstractmethod  # the git checkouts' operation name
    def sources_label(self, s: Settings) -> str: ...

    @abstractmethod  # the build's operation name
    def build_label(self, s: Settings, name: str, jobs: int) -> str: ...

    def label(self, s: Settings) -> str:
        return f"vLLM {s.vllm_version}"  # what the runtime is, in a label (the fork's: "fork 63cfe8965bcc")

    def capability_line(self, s: Settings) -> str:
        """The runtime, as preflight's compute-capability line names it."""
        return f"runtime_kind upstream (vLLM {s.vllm_version}) is set up here for compute capability"

    def line_notes(self, s: Settings) -> list[str]:
        """Which release line the settings are on (tasks/fork_releases.py)."""
        return [f"line: upstream vLLM release {s.vllm_version} (runtime_kind upstream), not the fork"]

    def fork_line(self, s: Settings) -> str | None:
        return None  # the fork's release line the settings build: none

    def not_the_fork(self, s: Settings) -> str | None:
        """Why there are no fork releases to list for these settings (None: list them)."""
        return (
            f"releases: this host runs vLLM {s.vllm_version} (runtime_kind upstream, upstream_build "
            f"{s.upstream_build}), "
            f"not the fork; the releases the rig supports: {', '.join(upstream_releases.supported_versions())} "
            "(try one with tasks/update_fork.py --data vllm_version=V and its torch/FlashInfer pins)"
        )
