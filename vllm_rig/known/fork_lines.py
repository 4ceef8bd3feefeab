"""The weicj fork's two release lines, told as its own files tell them, and what each asks of a host.

Read at the fork's 0.2.2-post3 state through its mirror JohnieBraaf/vLLM-2080Ti-Definitive@f92d50829db2
(weicj/vLLM-2080Ti-Definitive itself was not readable from here):
- README: "For CUDA 12.8, PyTorch 2.11, older kernels, or GCC 12/13/14, refer to the `0.1.x` line, which is no
  longer actively maintained."
- PROJECT_RELEASE.env: FORK_RELEASE 0.2.2-post3, BASE_VLLM_VERSION 0.29.1rc0-33-gb23433088b (upstream nightly
  b23433088bf2), RUNTIME_IDENTITY vllm-def-cu130, CUDA 13.0, torch 2.13.0+cu130, Python 3.12, PRIMARY_UBUNTU
  26.04+, PRIMARY_MIN_KERNEL_MAJOR 7, PRIMARY_GCC_MAJOR 15; LEGACY_RUNTIME_BRANCH v0.1.x (CUDA 12.8, torch 2.11.0).
- build.sh: requires `uv` on PATH; CUDA_HOME from /usr/local/cuda-13.0 or /usr/local/cuda-13; check_primary_host
  fails the build unless nvcc's major is 13, `gcc -dumpversion`'s major is 15 and the kernel's major is >= 7,
  except with ALLOW_HOST_MISMATCH=1 or REQUIRE_PRIMARY_ENV=0 ("only for a non-target dry run", its message
  says); on glibc >= 2.41 it stops unless CUDA_HOME carries toolchain-patches/cuda-13.0-glibc-2.41-rsqrt.patch.
The v0.1.x facts (vLLM 0.21.0 base, CUDA 12.8, torch 2.11.0+cu128, Python 3.11, GCC 12-14, v0.1.17 of
2026-08-24) are the ones the fork kind is built from (vllm_rig/known/fork_interface.py, docs/runtime.md).

Ubuntu 24.04 against the 0.2 line: its default compiler is GCC 13, so `gcc -dumpversion` says 13 and build.sh
stops; gcc-14 is in noble too (its HWE kernels are built with it: the driver stage relies on both,
vllm_rig/stages/driver/packages.py). That noble's archive has no gcc-15 is belief, not checked against Ubuntu's
package lists from here. Kernel 7 is reachable on 24.04 (an owner runs 24.04.4 on 7.0.0-31-generic:
Aiakos1818/qwen3-8-27b-dual-2080ti-vllm README@03164047). glibc there is 2.39, so the rsqrt patch is not needed.
Whether the tree compiles with GCC 13 or 14 under ALLOW_HOST_MISMATCH=1 is not known: no public build of it
on 24.04 was found.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "JohnieBraaf/vLLM-2080Ti-Definitive@f92d50829db2 (a mirror of the fork at 0.2.2-post3)"


@dataclass(frozen=True)
class ForkLine:
    line: str  # the tag prefix: its releases are line.N
    latest: str
    base: str  # the upstream vLLM it is built on
    cuda: str
    torch: str
    python: str
    gcc: str
    kernel: str
    status: str  # what the fork's own README says of it
    host_check: str  # what its build.sh asks of the host before it builds
    ubuntu_2404: str  # whether it builds on Ubuntu 24.04, and what of that is belief


V0_1 = ForkLine(
    line="v0.1",
    latest="v0.1.17 (2026-08-24)",
    base="vLLM 0.21.0",
    cuda="12.8",
    torch="2.11.0+cu128",
    python="3.11",
    gcc="12-14",
    kernel="any",
    status='legacy: "no longer actively maintained" (the fork\'s README)',
    host_check="no distro, GCC or kernel check (its preflight counts cores, RAM, disk and GPUs)",
    ubuntu_2404="builds there: its CHANGELOG (v0.1.9) names Ubuntu 22.04/24.04 as the recommended host",
)

V0_2 = ForkLine(
    line="v0.2",
    latest="v0.2.2-post3 (2026-10-01)",
    base="vLLM 0.29.1rc0 nightly (b23433088bf2)",
    cuda="13.0",
    torch="2.13.0+cu130",
    python="3.12",
    gcc="15",
    kernel=">= 7",
    status="the maintained line (targets Ubuntu 26.04+)",
    host_check=(
        "uv on PATH, nvcc 13 under /usr/local/cuda-13.0 or -13, GCC 15, kernel >= 7; otherwise it stops "
        "unless ALLOW_HOST_MISMATCH=1 (or REQUIRE_PRIMARY_ENV=0)"
    ),
    ubuntu_2404=(
        "not as it stands: stock 24.04 has GCC 13, so build.sh stops at its GCC check without ALLOW_HOST_MISMATCH=1; "
        "no gcc-15 in noble's archive (belief); kernel 7 is reachable (an owner runs 24.04 on 7.0); "
        "a build with the override on GCC 13/14 is untried"
    ),
)

LINES = {fork_line.line: fork_line for fork_line in (V0_1, V0_2)}
