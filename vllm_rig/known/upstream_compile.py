"""What `upstream_build: compile` builds a release from: PyPI's source archive of vLLM, and the sources its CMake
would fetch during the compile (docs/upstream-facts.md §5, §5a, §5b, §5c).

Read from PyPI's `vllm-0.26.0.tar.gz` and `vllm-0.27.1.tar.gz` (unpacked, never run here): the hash is the pin,
because the tag's commit is not known here (`vllm/_version.py` holds only a 9-hex-digit prefix: `gf2654939e`,
`g6e448d0ea`); `[build-system] requires` of its pyproject.toml; CMakeLists.txt and cmake/external_projects/*.cmake
for each FetchContent source, its pin and the variable that points CMake at a local copy instead. Only releases
with a row here can be compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The CUDA version vLLM's setup.py builds its PyPI wheels with (envs.VLLM_MAIN_CUDA_VERSION's default in 0.26.0
# and 0.27.1):
# a build with another CUDA gets "+cu<major><minor>" after its version (setup.py get_vllm_version).
MAIN_CUDA = "13.0"


@dataclass(frozen=True)
class Sdist:
    version: str
    filename: str
    sha256: str
    size: int
    build_requires: tuple[str, ...]  # pyproject.toml [build-system] requires, torch left to the torch lane
    sources: dict[str, dict[str, Any]]  # FetchContent name -> {"repo", "ref", "env", "min_arch"}


# Each CMake source: what CMakeLists.txt / cmake/external_projects/<name>.cmake pins, and the variable it reads
# for a local copy. All of a release's sources (0.26.0: eight, 0.27.1: nine) are fetched whatever
# TORCH_CUDA_ARCH_LIST says (only their kernels depend on it), so each is checked out ahead; what a missing one
# does, with FetchContent disconnected, is in the comments (file:lines of the 0.26.0 sdist; docs/upstream-facts.md §5).
SOURCES_0_26_0: dict[str, dict[str, Any]] = {
    "cutlass": {  # CUTLASS_REVISION v4.4.2 (CMakeLists.txt:438-466; missing: a warning, then the compile fails on
        # its headers); the commit of that tag, as the fork kind's cutlass_ref
        "repo": "https://github.com/NVIDIA/cutlass.git",
        "ref": "da5e086dab31d63815acafdac9a9c5893b1c69e2",
        "env": "VLLM_CUTLASS_SRC_DIR",
        "min_arch": None,
    },
    "triton_kernels": {  # DEFAULT_TRITON_KERNELS_TAG v3.5.1 (triton_kernels.cmake:3-53; missing: a warning and
        # nothing installed); the tag's commit is not recorded here (known/git_tags.py), so settings.py refuses a
        # compile until upstream_compile_sources gives it: a tag is never checked out
        "repo": "https://github.com/triton-lang/triton.git",
        "ref": "v3.5.1",
        "env": "TRITON_KERNELS_SRC_DIR",
        "min_arch": None,
    },
    "fmha_sm100": {  # vllm-project/MSA (fmha_sm100.cmake:5-73; its Python and headers are installed: missing, the
        # install step fails)
        "repo": "https://github.com/vllm-project/MSA.git",
        "ref": "2e63ec37a0fc29bc20f39cd1a52e0f5affc33a73",
        "env": "FMHA_SM100_SRC_DIR",
        "min_arch": None,
    },
    "tml_fa4": {  # vllm-project/tml-fa4 (tml_fa4.cmake:3-50; missing: a warning, nothing installed)
        "repo": "https://github.com/vllm-project/tml-fa4.git",
        "ref": "b206834606ed5b5f21f8eed6b0683f528ea9cf7d",
        "env": "TML_FA4_SRC_DIR",
        "min_arch": None,
    },
    "flashmla": {  # flashmla.cmake:7-43: its interface is file(READ) before the arch check (missing: configure stops)
        "repo": "https://github.com/vllm-project/FlashMLA.git",
        "ref": "a8f794d1251cbfd88a5011445dd5582289c727e4",
        "env": "FLASH_MLA_SRC_DIR",
        "min_arch": None,
    },
    "qutlass": {  # qutlass.cmake:5-54: a Populate form that ignores FULLY_DISCONNECTED and git-clones from GitHub
        "repo": "https://github.com/IST-DASLab/qutlass.git",
        "ref": "830d2c4537c7396e14a02a46fbddd18b5d107c65",
        "env": "QUTLASS_SRC_DIR",
        "min_arch": None,
    },
    "vllm-flash-attn": {  # vllm_flash_attn.cmake:28-57 (missing: ninja's unknown target _vllm_fa2_C, setup.py:1132)
        "repo": "https://github.com/vllm-project/flash-attention.git",
        "ref": "caaa4eb59845388a20b1f435ecaafb4bd9517ad8",
        "env": "VLLM_FLASH_ATTN_SRC_DIR",
        "min_arch": None,
    },
    "deepgemm": {  # deepgemm.cmake:7-59: fetched on every arch (its kernels are 9.0a, 10.0f, 12.0f only), by the
        # Populate form that git-clones past FULLY_DISCONNECTED: without a local copy a box reaches GitHub
        "repo": "https://github.com/deepseek-ai/DeepGEMM.git",
        "ref": "a6b593d2826719dcf4892609af7b84ee23aaf32a",
        "env": "DEEPGEMM_SRC_DIR",
        "min_arch": None,
    },
}

# 0.27.1's sources (file:lines of the 0.27.1 sdist; docs/upstream-facts.md §5c): CUTLASS (CMakeLists.txt:451-479),
# triton_kernels (triton_kernels.cmake:3-58, still v3.5.1 for CUDA), FlashMLA and tml-fa4 as in 0.26.0; new pins
# for MSA, QuTLASS and vllm-flash-attn; DeepGEMM from vllm-project's fork; and a ninth, FlashKDA.
SOURCES_0_27_1: dict[str, dict[str, Any]] = {
    **{name: SOURCES_0_26_0[name] for name in ("cutlass", "triton_kernels", "tml_fa4", "flashmla")},
    "fmha_sm100": {**SOURCES_0_26_0["fmha_sm100"], "ref": "087c161814d4d9c735b46c21212a09e5f8eb92fa"},
    "qutlass": {**SOURCES_0_26_0["qutlass"], "ref": "e74319e3405ce6d71965732880f5dc1f52371f64"},
    "vllm-flash-attn": {**SOURCES_0_26_0["vllm-flash-attn"], "ref": "28e862d21806bc3580207aa0ad4e2759151e9827"},
    "deepgemm": {  # deepgemm.cmake:7-59, the same Populate form; the repository is now vllm-project's fork
        "repo": "https://github.com/vllm-project/DeepGEMM.git",
        "ref": "e21c821f39a2056d68067a466c64ddc942200106",
        "env": "DEEPGEMM_SRC_DIR",
        "min_arch": None,
    },
    "flashkda": {  # flashkda.cmake:3-23: FetchContent_MakeAvailable before the arch check (9.0a, 10.x, 12.x only),
        # so fetched on every arch; missing, disconnected: a warning, and SM75 builds and installs nothing of it
        "repo": "https://github.com/vllm-project/FlashKDA.git",
        "ref": "a3e42bbbece3bb38f7c426b880315294a336e82f",
        "env": "FLASH_KDA_SRC_DIR",
        "min_arch": None,
    },
}

# pyproject.toml [build-system] requires of both archives, torch (==2.11.0, ==2.13.0) left to the lane.
BUILD_REQUIRES = (
    "cmake>=3.26.1",
    "ninja",
    "packaging>=24.2",
    "setuptools>=77.0.3,<81",
    "setuptools-scm>=8",
    "setuptools-rust>=1.9.0",
    "wheel",
    "jinja2",
)

SDISTS: dict[str, Sdist] = {
    "0.26.0": Sdist(
        version="0.26.0",
        filename="vllm-0.26.0.tar.gz",
        sha256="23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502",
        size=38353572,
        build_requires=BUILD_REQUIRES,
        sources=SOURCES_0_26_0,
    ),
    "0.27.1": Sdist(
        version="0.27.1",
        filename="vllm-0.27.1.tar.gz",
        sha256="eec2d54d137ac1e59cb4c39226dfee1943eefc8f4788f5821d7300d6acbdb646",
        size=39257426,
        build_requires=BUILD_REQUIRES,
        sources=SOURCES_0_27_1,
    ),
}

# The two sources the compile step hands to CMake by their own variables (as the fork kind's build does), and
# the folder of the triton checkout that TRITON_KERNELS_SRC_DIR names.
CUTLASS, TRITON_KERNELS = "cutlass", "triton_kernels"
REQUIRED_SOURCES = (CUTLASS, TRITON_KERNELS)


# The release's requirements/cuda.txt names CUDA 13 extras (0.26.0 and 0.27.1 alike: humming-kernels[cu13]==0.1.10,
# nvidia-cutlass-dsl[cu13]==4.6.0); a CUDA 12 lane takes each package's CUDA 12 variant, read from its PyPI wheel's
# METADATA: humming-kernels 0.1.10 (sha256 4ded0998...bc972b4) provides extras cu12 and cu13;
# nvidia-cutlass-dsl 4.6.0 (sha256 e3e0e4d8...2308ca8) requires nvidia-cutlass-dsl-libs-cu12 by default and
# -cu13 only under its cu13 extra. 0.27.1's other new pins ask for no cu13 extra (quack-kernels==0.6.1 requires
# nvidia-cutlass-dsl==4.6.0, its cu13 extra unasked; flashinfer-python 0.6.16.post3 likewise). Extra name -> the
# lane's ("" drops it).
CUDA12_EXTRAS: dict[str, dict[str, str]] = {
    "humming-kernels": {"cu13": "cu12"},
    "nvidia-cutlass-dsl": {"cu13": ""},
}


def sdist(version: str) -> Sdist:
    """The release's source archive row; ValueError naming the releases that have one."""
    try:
        return SDISTS[version]
    except KeyError:
        have = ", ".join(SDISTS)
        raise ValueError(
            f"vLLM {version}'s source archive is not recorded (sha256 and CMake sources): upstream_build compile "
            f"supports {have}; use upstream_build wheel for {version}"
        ) from None


def local_version(version: str, cuda: str) -> str:
    """The version setup.py gives a build with CUDA `cuda` ("12.9" -> "0.26.0+cu129")."""
    return version if cuda == MAIN_CUDA else f"{version}+cu{cuda.replace('.', '')}"
