"""FlashInfer's SM75 shared-memory probe (vllm_rig/host/flashinfer_smem.py) with the real compiler on the real wheels.

Real sources, no stand-ins: PyPI's flashinfer-python wheels and the CUDA 13.0 compiler parts the upstream runtime
installs in its venv (nvidia-cuda-nvcc/-crt 13.0.88, -cccl 13.0.85, nvidia-nvvm 13.0.88, nvidia-cuda-runtime
13.0.96: nvidia/cu13/{bin,include,lib,nvvm}), downloaded with pip (--no-deps) and unpacked once under
~/.cache/vllm-rig-sandbox/flashinfer-smem/. The product's own `probe` runs against each unpacked package: it
finds it through a python whose path holds only that site-packages, compiles with that nvcc (and this machine's
g++, tests/sandbox/host-packages.txt) and reads the sizes. One compile per wheel (~10 s).

What it shows: 0.6.16.post3 (vLLM 0.27.x's pin) fits SM75's 65,536 B for FP16 and FP8 KV; 0.6.14 (vLLM
0.26.0's) does not (the negative control, 65,616 / 65,600 B); 0.6.12 does not either, and its FP8 tile is the
64-row one its dispatcher picks (a fixed 32-row probe reads 49,184 B and would pass it); 0.6.8.post1 (the fork's
pin, no vendored CCCL: the toolkit's is used) fits both, exactly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_rig.host import flashinfer_smem as fs

CACHE = Path.home() / ".cache" / "vllm-rig-sandbox" / "flashinfer-smem"
# cuda-toolkit 13.0.3's nvcc extra pins nvcc/crt/nvvm to 13.0.88 (vllm_rig/known/cuda_toolkit.py, 2.13.0 torch)
TOOLKIT = (
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
)
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64")
DONE = ".unpacked"  # written last: a cut-short unpack is redone


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def _download(requirements: tuple[str, ...], dest: Path) -> list[Path]:
    """pip download --no-deps of exact pins into `dest` (a wheel already there is not fetched again)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:"]
    cmd += [arg for p in PLATFORMS for arg in ("--platform", p)] + ["--python-version", "3.12", "-d", str(dest)]
    proc = subprocess.run([*cmd, *requirements], capture_output=True, text=True, env=_clean_env(), check=False)
    assert proc.returncode == 0, f"pip could not download {' '.join(requirements)}:\n{proc.stderr[-2000:]}"
    wheels = []
    for req in requirements:
        name, version = req.split("==")
        found = sorted(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        assert len(found) == 1, f"pip download of {req} left {[p.name for p in found]} in {dest}"
        wheels.append(found[0])
    return wheels


def _unpack(wheels: list[Path], site: Path, members: tuple[str, ...] = ()) -> Path:
    """The wheels unpacked into `site` as pip would lay them out (only names starting with `members`, if given);
    done once, marked when complete."""
    if (site / DONE).is_file():
        return site
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if members and not info.filename.startswith(members):
                    continue
                path = Path(z.extract(info, site))
                if (info.external_attr >> 16) & 0o111:  # nvcc, ptxas, cicc, ...: keep them executable
                    path.chmod(0o755)
    (site / DONE).write_text("")
    return site


@pytest.fixture(scope="module")
def nvcc() -> Path:
    """The venv's nvcc as the upstream runtime has it: site-packages/nvidia/cu13/bin/nvcc."""
    if shutil.which("g++") is None:
        pytest.fail("nvcc needs a host C++ compiler: apt-get install g++ (bin/test --all installs host-packages.txt)")
    site = _unpack(_download(TOOLKIT, CACHE / "wheels"), CACHE / "toolkit-13.0.88")
    path = site / "nvidia" / "cu13" / "bin" / "nvcc"
    assert "release 13.0, V13.0.88" in subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return path


def _python(tmp_path: Path, version: str) -> Path:
    """A python that sees flashinfer-python `version` (the package and its dist-info) and nothing else of it."""
    wheel = _download((f"flashinfer-python=={version}",), CACHE / "wheels")
    site = _unpack(wheel, CACHE / f"flashinfer-{version}", ("flashinfer/", "flashinfer_python-"))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


@pytest.mark.parametrize(
    ("version", "fp16", "fp8", "fp8_rows", "fits"),
    [
        ("0.6.16.post3", 65_536, 65_536, 32, True),
        ("0.6.16", 65_536, 65_536, 32, True),  # the fork kind's default; the same prefill.cuh as .post3
        ("0.6.15", 65_616, 65_600, 32, False),
        ("0.6.14", 65_616, 65_600, 32, False),
        # FP8 KV kept at one byte: the dispatcher takes 4 MMA-KV steps, and only that tile overflows (at a
        # fixed 32 rows it is 49,184 B: a fixed-tile probe would pass it)
        ("0.6.12", 65_568, 65_568, 64, False),
        ("0.6.8.post1", 65_536, 65_536, 64, True),
    ],
)
def test_the_probe_on_the_real_wheel(
    nvcc: Path, tmp_path: Path, version: str, fp16: int, fp8: int, fp8_rows: int, fits: bool
) -> None:
    installed, sizes = fs.probe(_python(tmp_path, version), nvcc)
    assert installed.version == version
    assert installed.header == CACHE / f"flashinfer-{version}" / "flashinfer" / "data" / fs.HEADER
    assert (sizes.fp16, sizes.fp8) == (fp16, fp8)
    assert (sizes.tile("fp16"), sizes.tile("fp8")) == (32, fp8_rows)
    for kv in fs.KINDS:
        line = fs.verdict(version, sizes, kv)
        assert (line is None) is fits, line
        if not fits:
            assert line is not None and f"FlashInfer {version}" in line and "65,536 B" in line
    record = fs.record(installed, sizes, "fp8")
    assert record["fits"] is fits and len(str(record["prefill_cuh_sha256"])) == 64


# The sandbox's stand-in headers carry what this probe prints for the release each stands for (the stand-in nvcc
# answers the probe with them, tests/sandbox/fixtures/nvidia_repo/templates/nvcc): prefill-<header>.cuh -> release.
STANDIN_OF = {
    "prefill-0.6.8.post1.cuh": "0.6.8.post1",
    "prefill-0.6.12.cuh": "0.6.12",
    "prefill-0.6.14.cuh": "0.6.14",
    "prefill-0.6.15.cuh": "0.6.15",
    "prefill-0.6.16.cuh": "0.6.16",
}


@pytest.mark.parametrize("header", sorted(STANDIN_OF))
def test_the_standin_header_carries_the_real_probes_output(nvcc: Path, tmp_path: Path, header: str) -> None:
    from tests.sandbox.fixtures.pkg_index import standins

    sizes = fs.probe(_python(tmp_path, STANDIN_OF[header]), nvcc)[1]
    text = (standins.HEADERS / header).read_text()
    carried = "".join(
        line.removeprefix("// probe-prints ") + "\n"
        for line in text.splitlines()
        if line.startswith("// probe-prints ")
    )
    assert fs.parse_sizes(carried) == sizes
    assert carried == "".join(f"{kv} {tile} {sizes.table[(kv, tile)]}\n" for kv in fs.KINDS for tile in fs.TILES)


def test_the_standin_pr_3621_header_carries_the_real_fixs_output(nvcc: Path, tmp_path: Path) -> None:
    """PR 3621's prefill.cuh (the head b6691f83) in place of the real 0.6.14's: VLLM_RIG_REAL_FIX_FILES names a
    directory of raw-content files (<commit>/include/...), as tests/unit/test_flashinfer_check.py takes it."""
    from tests.sandbox.fixtures.pkg_index import fixes, standins

    fixed = os.environ.get("VLLM_RIG_REAL_FIX_FILES")
    if not fixed:
        pytest.skip("set VLLM_RIG_REAL_FIX_FILES to the fixed headers (raw-content layout)")
    python = _python(tmp_path, "0.6.14")
    site = tmp_path / "site"
    shutil.copytree(CACHE / "flashinfer-0.6.14", site)
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    header = site / "flashinfer" / "data" / fs.HEADER
    header.write_bytes((Path(fixed) / fixes.fix("3621").commit / fixes.PREFILL).read_bytes())
    sizes = fs.probe(python, nvcc)[1]
    text = (standins.HEADERS / "prefill-0.6.14+pr3621.cuh").read_text()
    carried = "".join(
        line.removeprefix("// probe-prints ") + "\n"
        for line in text.splitlines()
        if line.startswith("// probe-prints ")
    )
    assert fs.parse_sizes(carried) == sizes
