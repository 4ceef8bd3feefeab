"""The GPU and link rules, written once: preflight judges the facts it read from the control side, the GPU verdict
judges on the box, both by these. Standard library only (the verdict imports it inside the host package).

A GPU is a mapping with gpu_facts.Gpu's keys (index, memory_mib, compute_cap, architecture); a matrix is
{"GPU0": {"GPU1": cell}} in nvidia-smi's words, as nvml.Links carries the topology and the P2P grant; `down` is
nvml.Links.nvlink_down ("GPU1 link 2", "GPU0 all links").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .gpu_facts import CAPABILITY_ARCH

GPU = Mapping[str, Any]


def memory_problem(gpu: GPU, least: int) -> str | None:
    """Less memory than the model's plan needs, or none reported."""
    memory = gpu.get("memory_mib")
    if memory is None:
        return "memory not reported by nvidia-smi (N/A)"
    return f"{memory} MiB" if memory < least else None


def capability_problem(gpu: GPU, wanted: str) -> str | None:
    """Not the compute capability the runtime is built for. The XML names the architecture, which fixes the
    capability for all but Ampere: there the architecture must match and the rest rests on the torch probe."""
    have, arch = gpu.get("compute_cap"), gpu.get("architecture")
    if have is not None:
        return None if have == wanted else f"compute capability {have}" + (f" ({arch})" if arch else "")
    if arch is None:
        return "compute capability not reported (no architecture in nvidia-smi's XML)"
    want_arch = CAPABILITY_ARCH.get(wanted)
    return None if arch == want_arch else f"GPU architecture {arch}, not {want_arch} (compute capability {wanted})"


def pairs(indexes: Sequence[int | None]) -> list[tuple[str, str]]:
    """Every unordered pair of the GPUs, as the matrices name them: ("GPU0", "GPU1"), ..."""
    names = [f"GPU{i}" for i in indexes]
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def cell(matrix: Mapping[str, Mapping[str, str]], a: str, b: str) -> str | None:
    return matrix.get(a, {}).get(b) or matrix.get(b, {}).get(a)


@dataclass(frozen=True)
class Links:
    """The links between the GPUs a rig uses: topology per pair ("NV2", "PHB"), the driver's P2P grant per
    pair ("OK", "CNS"), the NVLink links not up, and the GPUs whose links NVML says are all inactive."""

    kinds: dict[str, str | None]
    grants: dict[str, str | None]
    down: list[str]
    all_down: list[str]

    def nvlink_problem(self) -> str | None:
        """Why NVLink does not carry the traffic between every pair, or None."""
        if self.all_down:
            return (
                f"{', '.join(self.all_down)}: NVML says all links are inactive: the NVLink bridge is down "
                "(missing or not seated)"
            )
        if not_nv := self.not_nvlink():
            return (
                ", ".join(f"{pair} connected by {kind or 'unknown'}" for pair, kind in not_nv.items()) + ", no NVLink"
            )
        if self.down:
            return f"{', '.join(self.down)} inactive"
        return None

    def not_nvlink(self) -> dict[str, str | None]:
        """The pairs NVML does not join by an active NVLink (PHB, SYS... or unread)."""
        return {pair: kind for pair, kind in self.kinds.items() if not (kind and kind.startswith("NV"))}

    def refused(self) -> dict[str, str | None]:
        """The pairs the driver does not grant P2P (CNS, GNS, TNS, NS...)."""
        return {pair: grant for pair, grant in self.grants.items() if grant != "OK"}


def links(topo: Mapping, p2p: Mapping, down: Sequence[str], indexes: Sequence[int | None]) -> Links:
    used = {f"GPU{i}" for i in indexes}
    pair_list = pairs(indexes)
    mine = [d for d in down if d.split()[0] in used]
    return Links(
        kinds={f"{a}-{b}": cell(topo, a, b) for a, b in pair_list},
        grants={f"{a}-{b}": cell(p2p, a, b) for a, b in pair_list},
        down=[d for d in mine if not d.endswith("all links")],
        all_down=[d.split()[0] for d in mine if d.endswith("all links")],
    )
