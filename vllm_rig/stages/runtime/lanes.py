"""What both compiled runtimes (the fork, and upstream_build compile) share: the torch index's CUDA lane and
which CMake sources a build for an arch list fetches."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from vllm_rig.settings import Settings

# What comes from the torch index's CUDA lane, as the fork's build.sh installs it (torch, torchaudio and
# torchvision at the validated versions; triton is torch's own pin).
TORCH_LANE_PACKAGES = ("torch", "torchvision", "torchaudio", "triton")

# The torch index builds carry the lane as their local version (2.11.0+cu128); PyPI's torch 2.11.0 is another
# build (CUDA 13). triton has no local version on either.
LOCAL_VERSION_PACKAGES = ("torch", "torchvision", "torchaudio")


def torch_lane(index_url: str) -> str:
    """The CUDA lane of a torch index URL (".../whl/cu128/" -> "cu128"); the URL itself when it names none."""
    match = re.search(r"/(cu\d+|cpu|rocm[\d.]+|xpu)/?$", index_url)
    return match.group(1) if match else index_url


def lane_word(s: Settings) -> str:
    """The torch lane as a lock file's name word."""
    return torch_lane(s.torch_index_url).replace("/", "_").replace(":", "_")


def torch_exact_versions(s: Settings) -> dict[str, str]:
    """The exact versions the torch step installs and checks ("torch" -> "2.11.0+cu128"), as the fork's
    build.sh pins them; {} for an index URL that names no lane (then only the public version is known)."""
    lane = torch_lane(s.torch_index_url)
    if lane == s.torch_index_url:
        return {}
    public = {"torch": s.torch_version, "torchvision": s.torchvision_version, "torchaudio": s.torchaudio_version}
    return {name: f"{public[name]}+{lane}" for name in LOCAL_VERSION_PACKAGES}


def fetched_for(entry: Mapping[str, Any], arch: str) -> bool:
    """Whether a CMake source entry ({"min_arch": ...}) is fetched by a build for `arch`."""
    min_arch = entry.get("min_arch")
    return min_arch is None or Version(arch) >= Version(str(min_arch))
