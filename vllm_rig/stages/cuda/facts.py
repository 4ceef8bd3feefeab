"""The CUDA toolkit as the fork's build sees it: nvcc's release, the static libraries, /usr/local/cuda."""

from __future__ import annotations

import re
import shlex
from typing import Any

from pyinfra.api import FactBase

from vllm_rig.core.facts import split_sections

# The fork's build.sh refuses to build without these (shared/notes/fork-notes.md).
STATIC_LIBS = ("libcudadevrt.a", "libcudart_static.a", "libculibos.a")


class CudaToolkit(FactBase):
    def command(self, cuda_home: str) -> str:
        home = shlex.quote(cuda_home)
        libs = " ".join(STATIC_LIBS)
        script = (
            f"echo @@nvcc; {home}/bin/nvcc --version 2>&1 || true; "
            f"echo @@libs; for l in {libs}; do test -e {home}/lib64/$l && echo $l; done; "
            "echo @@link; readlink -f /usr/local/cuda 2>/dev/null || true"
        )
        return "sh -c " + shlex.quote(script)

    def process(self, output: list[str]) -> dict[str, Any]:
        raw = split_sections(output)
        match = re.search(r"release (\d+\.\d+), V([\d.]+)", " ".join(raw.get("nvcc", [])))
        present = {line.strip() for line in raw.get("libs", [])}
        link = [line.strip() for line in raw.get("link", []) if line.strip()]
        return {
            "release": match.group(1) if match else None,
            "version": match.group(2) if match else None,
            "missing_libs": [lib for lib in STATIC_LIBS if lib not in present],
            "cuda_link": link[0] if link else None,
        }
