"""What both upstream kinds (vLLM's release wheel, and its source archive compiled) say alike: the release, not the
fork, with zyYuc's SM75 patch."""

from __future__ import annotations

from vllm_rig.known import upstream_releases
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds.base import RuntimeKind


class Upstream(RuntimeKind):
    def label(self, s: Settings) -> str:
        return f"vLLM {s.vllm_version}"

    def capability_line(self, s: Settings) -> str:
        return f"runtime_kind upstream (vLLM {s.vllm_version}) is set up here for compute capability"

    def line_notes(self, s: Settings) -> list[str]:
        return [f"line: upstream vLLM release {s.vllm_version} (runtime_kind upstream), not the fork"]

    def not_the_fork(self, s: Settings) -> str | None:
        return (
            f"releases: this host runs vLLM {s.vllm_version} (runtime_kind upstream, upstream_build "
            f"{s.upstream_build}), "
            f"not the fork; the releases the rig supports: {', '.join(upstream_releases.supported_versions())} "
            "(try one with tasks/update_fork.py --data vllm_version=V and its torch/FlashInfer pins)"
        )
