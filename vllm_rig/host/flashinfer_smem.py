"""Prove that FlashInfer's head-dim-256 prefill tile fits SM75's shared memory, by compiling the installed headers.

FlashInfer JIT-compiles its FA2 prefill from the headers in its package (flashinfer/data/include). On SM75
(2080 Ti) a thread block may opt in to 65,536 B of shared memory; when SharedStorageQKVO at head dim 256 (1 KV
warp, CTA_TILE_Q 64, the CTA_TILE_KV the dispatcher picks) is larger, the kernel cannot launch (0.6.10 to
0.6.15.post1: 65,568 to 65,616 B; 0.6.8.post1 and 0.6.16+: 65,536 B). Marker strings in the header only say
which fix is there; this measures the struct itself, with the compiler the runtime uses.

`probe` writes a small program to a temporary directory, compiles it with `nvcc -std=c++17 -arch=sm_75` against
the package's own data/include (and its vendored CCCL, when the wheel has one) and runs it. The runtime build
(runtime_build.py) calls `probe` and `verdict` and records `record(...)` in runtime.json, so the service's start
check compares hashes only. Stdlib only.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import runtime_artifact

LIMIT = 65_536  # SM75's per-block opt-in shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin)
HEADER = "include/flashinfer/attention/prefill.cuh"  # relative to the package's data directory
# The wheel's vendored CCCL (0.6.10+); older wheels have none and use the toolkit's own.
CCCL_DIRS = ("cccl/libcudacxx/include", "cccl/cub", "cccl/thrust")
COMPILE_TIMEOUT_S = 600

# One program prints every size, so one compile answers for either KV cache. Every release's template has these
# eight parameters first; later ones (kEnableVOSplitOpt, 0.7's ENABLE_FP4_REPACK, ...) have defaults, and the
# defaults are the configuration measured (the paged variant gives the same sizes).
PROBE_SOURCE = """\
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <flashinfer/attention/prefill.cuh>

template <typename KV, unsigned CTA_TILE_KV>
using Tile = flashinfer::SharedStorageQKVO<1, 64, CTA_TILE_KV, 256, 256, half, KV, half>;

template <typename KV>
void print(const char* kv) {
  std::printf("%s 16 %zu\\n", kv, sizeof(Tile<KV, 16>));
  std::printf("%s 32 %zu\\n", kv, sizeof(Tile<KV, 32>));
  std::printf("%s 64 %zu\\n", kv, sizeof(Tile<KV, 64>));
  std::printf("%s 128 %zu\\n", kv, sizeof(Tile<KV, 128>));
}

int main() {
  print<half>("fp16");
  print<__nv_fp8_e4m3>("fp8");
  return 0;
}
"""
SIZE_LINE = re.compile(r"^(fp16|fp8) (\d+) (\d+)$", re.M)
KINDS = ("fp16", "fp8")
# CTA_TILE_KV for NUM_MMA_KV 1, 2, 4, 8 with one KV warp: the only values DISPATCH_NUM_MMA_KV instantiates.
TILES = (16, 32, 64, 128)
MAX_MMA_KV = 8  # the register cap, 8 / NUM_MMA_Q, at CTA_TILE_Q 64
Q_TILE_BYTES = 64 * 256 * 2  # CTA_TILE_Q * HEAD_DIM_QK * sizeof(half): what the dispatcher sets aside first

# Where the package is and which release, without importing it (that would load torch and CUDA).
LOCATE = """\
import importlib.metadata as md, importlib.util, os
spec = importlib.util.find_spec("flashinfer")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
try:
    print(md.version("flashinfer-python"))
except md.PackageNotFoundError:
    print("unknown")
"""


class ProbeError(Exception):
    """The probe could not measure (no package, no compiler, a compile error): one line saying which."""


@dataclass(frozen=True)
class Installed:
    package: Path  # the flashinfer package directory
    version: str

    @property
    def data(self) -> Path:
        return self.package / "data"

    @property
    def header(self) -> Path:
        return self.data / HEADER


@dataclass(frozen=True)
class Sizes:
    """sizeof(SharedStorageQKVO) per (KV kind, CTA_TILE_KV), and the tile FlashInfer's dispatcher picks."""

    table: dict[tuple[str, int], int]

    def step_cost(self, kv: str) -> int:
        """Bytes one more NUM_MMA_KV step costs: the dispatcher's own per-step estimate (<= 0.6.12: K+V at the KV
        dtype; 0.6.13+: kKVSmemPerMmaKV, with FP8's repack staging), read off how the struct grows."""
        return (self.table[(kv, 128)] - self.table[(kv, 64)]) // 4

    def tile(self, kv: str, exact: bool = False) -> int:
        """The CTA_TILE_KV the dispatcher launches on SM75: (65,536 - its fixed part) / the per-step cost, capped
        at 8 and taken down to 8, 4, 2 or 1 steps; 0 when not even one fits. Every release's dispatcher takes the
        Q tile alone as the fixed part and so leaves out the struct's padding, which is how 0.6.10-0.6.15
        overflow: the size that counts is the struct's at that tile. (FP8 KV on <= 0.6.12 gets 64 rows, not
        32: a fixed-tile probe would miss its overflow.) `exact`: the dispatcher measures the fixed part from
        sizeof samples instead (PR 3621 on 0.6.14), padding included, and picks a smaller tile that fits."""
        fixed = self.table[(kv, 64)] - 4 * self.step_cost(kv) if exact else Q_TILE_BYTES
        most = min((LIMIT - fixed) // max(self.step_cost(kv), 1), MAX_MMA_KV)
        steps = next((n for n in (8, 4, 2, 1) if n <= most), 0)
        return 16 * steps

    def of(self, kv: str, exact: bool = False) -> int:
        """The struct's size at the tile the dispatcher picks (at the smallest tile when none fits)."""
        return self.table[(kv, self.tile(kv, exact) or TILES[0])]

    @property
    def fp16(self) -> int:
        return self.of("fp16")

    @property
    def fp8(self) -> int:  # __nv_fp8_e4m3; fp8_e5m2 is the same size
        return self.of("fp8")


def kv_kind(kv_cache_dtype: str) -> str:
    """The probe's KV column for a vLLM --kv-cache-dtype: 'auto' is the model's FP16, every fp8* is one byte."""
    if kv_cache_dtype in ("auto", "fp16", "half", "float16"):
        return "fp16"
    if kv_cache_dtype.startswith("fp8"):
        return "fp8"
    raise ValueError(f"no shared-memory probe for KV cache dtype {kv_cache_dtype!r}")


def locate(python: str | Path) -> Installed:
    """The flashinfer package the runtime's python would import, and its flashinfer-python version."""
    proc = subprocess.run([str(python), "-c", LOCATE], capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2 or not lines[0]:
        raise ProbeError(f"flashinfer is not installed for {python}: {proc.stderr.strip()[-300:]}".rstrip(": "))
    return Installed(Path(lines[0]), lines[1])


def include_dirs(data: Path) -> list[Path]:
    """-I directories: the package's headers, then its vendored CCCL where the wheel ships one (it must win
    over the toolkit's CCCL, as it does in FlashInfer's own JIT)."""
    return [data / "include", *(data / d for d in CCCL_DIRS if (data / d).is_dir())]


def compile_command(nvcc: Path, data: Path, source: Path, exe: Path) -> list[str]:
    cmd = [str(nvcc), "-std=c++17", "-arch=sm_75", *(f"-I{d}" for d in include_dirs(data))]
    # The PyPI toolkit keeps libcudart_static.a in lib/, where nvcc.profile looks in lib64/ (a toolkit
    # install's name, made by the build's cuda_toolkit step): name lib/ so the probe links either way.
    lib = nvcc.parent.parent / "lib"
    if lib.is_dir():
        cmd.append(f"-L{lib}")
    return [*cmd, str(source), "-o", str(exe)]


def parse_sizes(output: str) -> Sizes:
    """The probe's lines ("<kv> <CTA_TILE_KV> <bytes>"), in any order, among anything else it printed."""
    table = {(kv, int(tile)): int(size) for kv, tile, size in SIZE_LINE.findall(output)}
    if set(table) != {(kv, tile) for kv in KINDS for tile in TILES}:
        raise ProbeError(f"the probe printed no complete fp16/fp8 size table: {output.strip()[-200:]!r}")
    return Sizes(table)


def measure(nvcc: str | Path, data: Path, env: dict[str, str] | None = None) -> Sizes:
    """Compile and run the probe against `data` (a flashinfer package's data directory) with `nvcc`."""
    with tempfile.TemporaryDirectory(prefix="vllm-rig-fi-smem-") as tmp:
        source, exe = Path(tmp) / "probe.cu", Path(tmp) / "probe"
        source.write_text(PROBE_SOURCE)
        cmd = compile_command(Path(nvcc), data, source, exe)
        try:
            built = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=COMPILE_TIMEOUT_S, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ProbeError(f"could not run {nvcc}: {err}") from None
        if built.returncode != 0:
            said = (built.stderr + built.stdout).strip().splitlines() or ["no output"]
            raise ProbeError(f"{nvcc} could not compile the probe against {data}: {said[-1]}")
        try:
            ran = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ProbeError(f"the compiled probe did not run: {err}") from None
        if ran.returncode != 0:
            raise ProbeError(f"the probe exited {ran.returncode}: {ran.stderr.strip()[-200:]}")
        return parse_sizes(ran.stdout)


sha256_of = runtime_artifact.file_sha256


def probe(python: str | Path, nvcc: str | Path, env: dict[str, str] | None = None) -> tuple[Installed, Sizes]:
    """The installed FlashInfer and its two sizes."""
    installed = locate(python)
    if not installed.header.is_file():
        raise ProbeError(f"FlashInfer {installed.version} has no JIT header {installed.header}")
    return installed, measure(nvcc, installed.data, env)


def verdict(version: str, sizes: Sizes, kv: str, exact: bool = False) -> str | None:
    """None when the tile the served KV cache (`kv`: "fp16" or "fp8") launches with fits; else one line saying
    what does not fit and what to do. `exact`: see Sizes.tile."""
    tile = sizes.tile(kv, exact)
    if tile and sizes.of(kv, exact) <= LIMIT and not (kv == "fp8" and tile // 16 % 2):
        return None
    if kv == "fp8" and tile // 16 == 1:
        # KernelTraits::IsInvalid: 1-byte KV needs NUM_MMA_KV * 2 % NUM_WARPS_Q == 0 (4 Q warps here)
        why = "its only tile that fits (16 rows) is an invalid FP8 configuration"
    else:
        why = "its prefill kernels cannot launch on a 2080 Ti"
    return (
        f"FlashInfer {version}'s head-dim-256 prefill tile is {sizes.of('fp16', exact):,} B (FP16 KV) / "
        f"{sizes.of('fp8', exact):,} B "
        f"(FP8 KV) of shared memory, SM75 allows {LIMIT:,} B per block: with the {kv.upper()} KV cache served "
        f"{why}; use flashinfer-python 0.6.8.post1 or >= 0.6.16 (vLLM >= 0.27.0 pins 0.6.16.post3)"
    )


def ok_line(version: str, sizes: Sizes, kv: str, exact: bool = False) -> str:
    tile = sizes.tile(kv, exact)
    return (
        f"FlashInfer {version}'s head-dim-256 prefill tile for the {kv.upper()} KV cache is {sizes.of(kv, exact):,} B "
        f"({tile} KV rows), within SM75's {LIMIT:,} B per block"
    )


def record(installed: Installed, sizes: Sizes, kv: str, exact: bool = False) -> dict[str, object]:
    """What runtime.json keeps, so the start check can tell that the installed headers are the ones proven."""
    return {
        "flashinfer_version": installed.version,
        "prefill_cuh_sha256": sha256_of(installed.header),
        "kv": kv,
        "sizeof_fp16_kv": sizes.of("fp16", exact),
        "sizeof_fp8_kv": sizes.of("fp8", exact),
        "cta_tile_kv": {k: sizes.tile(k, exact) for k in KINDS},
        "limit": LIMIT,
        "fits": verdict(installed.version, sizes, kv, exact) is None,
    }
