#!/usr/bin/env python3
"""Prove that FlashInfer's head-dim-256 prefill tile fits SM75's shared memory, by compiling the installed headers.

FlashInfer JIT-compiles its FA2 prefill from the headers in its package (flashinfer/data/include). On SM75
(2080 Ti) a thread block may opt in to 65,536 B of shared memory; when SharedStorageQKVO at head dim 256
(the tile SM75 uses: 1 KV warp, CTA_TILE_Q 64, CTA_TILE_KV 32) is larger, the kernel cannot launch
(0.6.10 to 0.6.15.post1: 65,568 to 65,616 B; 0.6.8.post1 and 0.6.16+: 65,536 B). Marker strings in the
header only say which fix is there; this measures the struct itself, with the compiler the runtime uses:

    python3 vllm-rig-host.pyz flashinfer_smem --python <venv>/bin/python --nvcc <cuda_home>/bin/nvcc [--kv fp8]

It writes a small probe to a temporary directory, compiles it with `nvcc -std=c++17 -arch=sm_75` against the
package's own data/include (and its vendored CCCL, when the wheel has one), runs it and prints one line; exit 1
when the size the served KV cache needs is over the limit. The build calls `probe` and `verdict` directly and
records `record(...)` in runtime.json, so the service's start check compares hashes only. Stdlib only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

LIMIT = 65_536  # SM75's per-block opt-in shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin)
HEADER = "include/flashinfer/attention/prefill.cuh"  # relative to the package's data directory
# The wheel's vendored CCCL (0.6.10+); older wheels have none and use the toolkit's own.
CCCL_DIRS = ("cccl/libcudacxx/include", "cccl/cub", "cccl/thrust")
COMPILE_TIMEOUT_S = 600

# One program prints both sizes, so one compile answers for either KV cache. Every release's template has
# these eight parameters first; later ones (kEnableVOSplitOpt, 0.7's ENABLE_FP4_REPACK, ...) have defaults,
# and the defaults are the configuration measured (the paged variant gives the same sizes).
PROBE_SOURCE = """\
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <flashinfer/attention/prefill.cuh>

template <typename KV>
using Tile = flashinfer::SharedStorageQKVO<1, 64, 32, 256, 256, half, KV, half>;

int main() {
  std::printf("fp16 %zu\\n", sizeof(Tile<half>));
  std::printf("fp8 %zu\\n", sizeof(Tile<__nv_fp8_e4m3>));
  return 0;
}
"""
SIZE_LINE = re.compile(r"^(fp16|fp8) (\d+)$", re.M)

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
    fp16: int  # sizeof(SharedStorageQKVO) with FP16 (half) KV
    fp8: int  # with FP8 (__nv_fp8_e4m3) KV; fp8_e5m2 is the same size

    def of(self, kv: str) -> int:
        return self.fp16 if kv == "fp16" else self.fp8


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
    """The probe's two lines ("fp16 N", "fp8 N"), in any order, among anything else it printed."""
    found = dict(SIZE_LINE.findall(output))
    if set(found) != {"fp16", "fp8"}:
        raise ProbeError(f"the probe printed no fp16/fp8 sizes: {output.strip()[-200:]!r}")
    return Sizes(int(found["fp16"]), int(found["fp8"]))


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


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def probe(python: str | Path, nvcc: str | Path, env: dict[str, str] | None = None) -> tuple[Installed, Sizes]:
    """The installed FlashInfer and its two sizes."""
    installed = locate(python)
    if not installed.header.is_file():
        raise ProbeError(f"FlashInfer {installed.version} has no JIT header {installed.header}")
    return installed, measure(nvcc, installed.data, env)


def verdict(version: str, sizes: Sizes, kv: str) -> str | None:
    """None when the tile the served KV cache (`kv`: "fp16" or "fp8") uses fits; else one line saying what
    does not fit and what to do."""
    if sizes.of(kv) <= LIMIT:
        return None
    return (
        f"FlashInfer {version}'s head-dim-256 prefill tile needs {sizes.fp16:,} B (FP16 KV) / {sizes.fp8:,} B "
        f"(FP8 KV) of shared memory, over SM75's {LIMIT:,} B per block for the {kv.upper()} KV cache served: "
        "its prefill kernels cannot launch on a 2080 Ti; use flashinfer-python 0.6.8.post1 or >= 0.6.16 "
        "(vLLM >= 0.27.0 pins 0.6.16.post3)"
    )


def record(installed: Installed, sizes: Sizes, kv: str) -> dict[str, object]:
    """What runtime.json keeps, so the start check can tell that the installed headers are the ones proven."""
    return {
        "flashinfer_version": installed.version,
        "prefill_cuh_sha256": sha256_of(installed.header),
        "kv": kv,
        "sizeof_fp16_kv": sizes.fp16,
        "sizeof_fp8_kv": sizes.fp8,
        "limit": LIMIT,
        "fits": verdict(installed.version, sizes, kv) is None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the runtime's python (flashinfer installed)")
    parser.add_argument("--nvcc", required=True, help="the runtime's nvcc")
    parser.add_argument("--kv", default="auto", help="the served --kv-cache-dtype (auto, fp8, fp8_e4m3, ...)")
    parser.add_argument("--json", action="store_true", help="print the runtime.json record instead of a line")
    args = parser.parse_args(argv)
    try:
        kv = kv_kind(args.kv)
        installed, sizes = probe(args.python, args.nvcc)
    except (ProbeError, ValueError) as err:
        print(f"flashinfer_smem: FAIL: {err}", file=sys.stderr)
        return 1
    failed = verdict(installed.version, sizes, kv)
    if args.json:
        print(json.dumps(record(installed, sizes, kv), sort_keys=True))
    elif failed is None:
        print(
            f"flashinfer_smem: ok: FlashInfer {installed.version}'s head-dim-256 prefill tile is {sizes.fp16:,} B "
            f"(FP16 KV) / {sizes.fp8:,} B (FP8 KV), within SM75's {LIMIT:,} B for the {kv.upper()} KV cache"
        )
    if failed is not None:
        print(f"flashinfer_smem: FAIL: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
