"""The CUDA toolkit as the fork's build sees it: nvcc's release, the static libraries, /usr/local/cuda."""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, section_command

# The fork's build.sh refuses to build without these static libraries: validate_cuda_dev_files() in
# culyun/vLLM-2080Ti-Definitive@399bb74d:build.sh (a mirror of the fork's v0.1.17 release).
STATIC_LIBS = ("libcudadevrt.a", "libcudart_static.a", "libculibos.a")


class Toolkit(TypedDict):
    release: str | None  # nvcc's "release 12.9"; None when there is no nvcc
    version: str | None  # nvcc's "V12.9.86"
    missing_libs: list[str]
    cuda_link: str | None  # where /usr/local/cuda resolves to


class CudaToolkit(SectionFact[Toolkit]):
    DEFAULT: Toolkit = {"release": None, "version": None, "missing_libs": list(STATIC_LIBS), "cuda_link": None}

    def command(self, cuda_home: str) -> str:
        home = shlex.quote(cuda_home)
        libs = " ".join(STATIC_LIBS)
        return section_command(
            {
                "nvcc": f"{home}/bin/nvcc --version 2>&1",
                "libs": f"for l in {libs}; do test -e {home}/lib64/$l && echo $l; done",
                "link": "readlink -f /usr/local/cuda 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> Toolkit:
        match = re.search(r"release (\d+\.\d+), V([\d.]+)", " ".join(sections.lines("nvcc")))
        present = {line.strip() for line in sections.lines("libs")}
        return {
            "release": match.group(1) if match else None,
            "version": match.group(2) if match else None,
            "missing_libs": [lib for lib in STATIC_LIBS if lib not in present],
            "cuda_link": sections.first("link"),
        }
