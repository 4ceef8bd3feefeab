"""The stand-in nvcc answering FlashInfer's shared-memory probe (vllm_rig/host/flashinfer_smem.py), without a rig.

The stand-in FlashInfer wheels' headers carry what the real probe printed against the real releases
(tests/real/test_real_flashinfer_smem.py measured them, docs/verified.md); the stand-in nvcc, as the upstream
kind's venv ships it (nvidia/cu13/bin/nvcc) and as the fork kind's card toolkit ships it, compiles the probe into a
program printing them, and refuses what it cannot answer as the real nvcc fails a compile: another source, a
header not found, a header without sizes, sizes measured with another probe source.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.fixtures.nvidia_repo import catalog
from tests.sandbox.fixtures.pkg_index import fixes, standins, upstream, wheelfile
from tests.unit.test_flashinfer_smem import V0_6_8, V0_6_12, V0_6_14, V0_6_16
from vllm_rig.host import flashinfer_smem as fs
from vllm_rig.host import runtime_build

# What the real probe measured per release each stand-in header stands for (tests/real/test_real_flashinfer_smem.py;
# the same tables as the unit tests' constants): each served wheel must answer with its header's table.
REAL = {
    "prefill-0.6.8.post1.cuh": V0_6_8,
    "prefill-0.6.12.cuh": V0_6_12,
    "prefill-0.6.14.cuh": V0_6_14,
    "prefill-0.6.15.cuh": V0_6_14,  # 0.6.15 measured the same as 0.6.14
    "prefill-0.6.16.cuh": V0_6_16,  # 0.6.16, and 0.6.16.post3 (the same prefill.cuh)
}
FITS = ("prefill-0.6.8.post1.cuh", "prefill-0.6.16.cuh")


@pytest.fixture(scope="module")
def nvcc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The upstream runtime's nvcc: PyPI's nvidia-cuda-nvcc stand-in, installed into a site-packages."""
    site = wheelfile.install(
        next(d for d in upstream.cuda_dists() if d.name == "nvidia-cuda-nvcc"), tmp_path_factory.mktemp("cu")
    )
    path = site / upstream.CU13 / "bin" / "nvcc"
    assert "release 13.0, V13.0.88" in subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return path


def _python(tmp_path: Path, version: str) -> Path:
    """A runtime python that sees the stand-in flashinfer-python `version` as pip installed it."""
    site = wheelfile.install(standins.flashinfer_python(version), tmp_path / f"site-{version}")
    python = tmp_path / f"python-{version}"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


@pytest.mark.parametrize("version", sorted(standins.FLASHINFER_HEADERS))
def test_the_probe_reads_the_real_releases_sizes_from_each_wheel(tmp_path: Path, nvcc: Path, version: str) -> None:
    installed, sizes = fs.probe(_python(tmp_path, version), nvcc)
    header = standins.FLASHINFER_HEADERS[version][0]
    assert installed.version == version
    assert sizes == REAL[header]
    fits = header in FITS
    for kv in fs.KINDS:
        assert (fs.verdict(version, sizes, kv) is None) is fits


def test_the_fork_kinds_card_nvcc_answers_the_same(tmp_path: Path) -> None:
    deb = next(d for d in catalog.cuda_packages() if any(str(p).endswith("/bin/nvcc") for p in d.files))
    body = next(v for p, v in deb.files.items() if str(p).endswith("/bin/nvcc"))
    card = tmp_path / "cuda" / "bin" / "nvcc"
    card.parent.mkdir(parents=True)
    card.write_bytes(body if isinstance(body, bytes) else str(body).encode())
    card.chmod(0o755)
    assert f"V{catalog.CUDA_NVCC_VERSION}" in subprocess.run([card, "-V"], capture_output=True, text=True).stdout
    assert fs.probe(_python(tmp_path, "0.6.16"), card)[1] == V0_6_16


def test_pr_3621s_served_header_has_0_6_14s_struct_and_its_exact_tile(tmp_path: Path, nvcc: Path) -> None:
    """The build puts PR 3621's file in place of 0.6.14's prefill.cuh: FP16 KV then fits at 16 rows, FP8 KV's
    only fitting tile is invalid (the build's verdict)."""
    python = _python(tmp_path, "0.6.14")
    installed = fs.locate(python)
    (path, raw), *_ = ((p, raw) for p, raw in fixes.served().items() if fixes.fix("3621").commit in p)
    assert path.endswith(fixes.PREFILL)
    installed.header.write_bytes(raw)
    sizes = fs.probe(python, nvcc)[1]
    assert sizes == V0_6_14
    assert fs.verdict("0.6.14", sizes, "fp16", exact=True) is None
    assert "invalid FP8 configuration" in str(fs.verdict("0.6.14", sizes, "fp8", exact=True))


@pytest.mark.parametrize("name", sorted(p.name for p in standins.HEADERS.glob("prefill-*.cuh")))
def test_every_prefill_header_carries_sizes_measured_with_the_products_probe_source(name: str) -> None:
    """A changed PROBE_SOURCE fails here until the real probe is run again and the headers updated."""
    text = (standins.HEADERS / name).read_text()
    assert f"// probe-source-sha256 {hashlib.sha256(fs.PROBE_SOURCE.encode()).hexdigest()}\n" in text
    printed = "".join(f"{m[1]}\n" for m in re.finditer(r"^// probe-prints (.*)$", text, re.M))
    assert fs.parse_sizes(printed) and len(printed.splitlines()) == 8


# ---- refusals: what the real nvcc would fail, and what the stand-in cannot answer ------------------------------


def _compile(nvcc: Path, tmp_path: Path, source: str, include: Path | None) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "probe.cu"
    src.write_text(source)
    cmd = [str(nvcc), "-std=c++17", "-arch=sm_75", *([f"-I{include}"] if include else []), str(src), "-o", "probe"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)


def _include(tmp_path: Path, header: str) -> Path:
    inc = tmp_path / "include"
    (inc / "flashinfer" / "attention").mkdir(parents=True)
    (inc / "flashinfer" / "attention" / "prefill.cuh").write_text(header)
    return inc


def test_the_probe_compiles_into_a_program_printing_the_sizes(tmp_path: Path, nvcc: Path) -> None:
    inc = _include(tmp_path, (standins.HEADERS / "prefill-0.6.12.cuh").read_text())
    assert _compile(nvcc, tmp_path, fs.PROBE_SOURCE, inc).returncode == 0
    ran = subprocess.run([tmp_path / "probe"], capture_output=True, text=True, check=True)
    assert fs.parse_sizes(ran.stdout) == V0_6_12
    # the real program's order: print<half>, then print<__nv_fp8_e4m3>, each 16, 32, 64, 128 rows
    assert ran.stdout.splitlines()[0] == "fp16 16 49184" and ran.stdout.endswith("fp8 128 98336\n")


def test_a_header_without_sizes_fails_the_compile(tmp_path: Path, nvcc: Path) -> None:
    text = (standins.HEADERS / "prefill-0.6.16.cuh").read_text()
    forgotten = "".join(line for line in text.splitlines(keepends=True) if "probe-prints fp8 64" not in line)
    result = _compile(nvcc, tmp_path, fs.PROBE_SOURCE, _include(tmp_path, forgotten))
    assert result.returncode == 2 and not (tmp_path / "probe").exists()
    assert 'no "// probe-prints fp8 64" line' in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == f'1 error detected in the compilation of "{tmp_path / "probe.cu"}".'


def test_a_different_probe_source_fails_the_compile(tmp_path: Path, nvcc: Path) -> None:
    inc = _include(tmp_path, (standins.HEADERS / "prefill-0.6.16.cuh").read_text())
    result = _compile(nvcc, tmp_path, fs.PROBE_SOURCE.replace("64, CTA_TILE_KV", "128, CTA_TILE_KV"), inc)
    assert result.returncode == 2 and "measured with another probe source" in result.stderr


def test_a_header_not_found_fails_as_the_preprocessor_does(tmp_path: Path, nvcc: Path) -> None:
    result = _compile(nvcc, tmp_path, fs.PROBE_SOURCE, None)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'probe.cu'}:4:10: fatal error: flashinfer/attention/prefill.cuh: No such file or directory",
        "compilation terminated.",
    ]


def test_anything_else_is_refused(tmp_path: Path, nvcc: Path) -> None:
    result = _compile(nvcc, tmp_path, "int main() { return 0; }\n", None)
    assert result.returncode == 1 and "compiles only FlashInfer's shared-memory probe" in result.stdout
    assert not (tmp_path / "probe").exists()
    none = subprocess.run([nvcc], capture_output=True, text=True)
    assert none.returncode == 1 and "No input files specified" in none.stdout


# ---- the build's check step with the sandbox's pieces (vllm_rig/host/runtime_build.py check_flashinfer_smem) ----


def _build(tmp_path: Path, nvcc: Path, version: str, kv: str, fix: str | None) -> runtime_build.Build:
    """A runtime whose venv holds the stand-in flashinfer-python `version` (PR `fix`'s served prefill.cuh put in
    as the build puts it) and whose cuda_home is the stand-in nvcc's toolkit."""
    site = wheelfile.install(standins.flashinfer_python(version), tmp_path / "site")
    if fix is not None:
        served = fixes.served()[fixes.fix(fix).raw_path(fixes.PREFILL)]
        (site / standins.INCLUDE / "prefill.cuh").write_bytes(served)
    spec = {"runtime": str(tmp_path / "rt"), "cache": str(tmp_path / "c"), "fingerprint": "f" * 64}
    fixed = {"patch": f"pr{fix}", "files": {}} if fix else None
    build = runtime_build.Build(
        {**spec, "cuda_home": str(nvcc.parent.parent), "kv_cache_dtype": kv, "flashinfer_fix": fixed}
    )
    build.python.parent.mkdir(parents=True)
    # cuda_env() drops PYTHONPATH: the wrapper sets it itself
    build.python.write_text(f'#!/bin/sh\nexec env PYTHONPATH="{site}" "{sys.executable}" "$@"\n')
    build.python.chmod(0o755)
    return build


def test_a_pr_3621_runtime_passes_with_fp16_kv_and_records_it(tmp_path: Path, nvcc: Path, capsys) -> None:
    build = _build(tmp_path, nvcc, "0.6.14", "auto", "3621")
    build.check_flashinfer_smem()
    assert "FP16 KV cache is 49,232 B (16 KV rows), within SM75's 65,536 B" in capsys.readouterr().out
    record = json.loads((build.work / build.SMEM_RECORD).read_text())
    assert record["fits"] is True and record["cta_tile_kv"]["fp16"] == 16
    assert (
        record["prefill_cuh_sha256"]
        == hashlib.sha256(fixes.served()[fixes.fix("3621").raw_path(fixes.PREFILL)]).hexdigest()
    )


def test_a_pr_3621_runtime_fails_the_build_with_fp8_kv_in_one_line(tmp_path: Path, nvcc: Path) -> None:
    build = _build(tmp_path, nvcc, "0.6.14", "fp8_e4m3", "3621")
    with pytest.raises(runtime_build.BuildError) as failed:
        build.check_flashinfer_smem()
    line = str(failed.value)
    assert "\n" not in line and line.startswith("FlashInfer 0.6.14's head-dim-256 prefill tile is 49,232 B (FP16 KV)")
    assert "with the FP8 KV cache served its only tile that fits (16 rows) is an invalid FP8 configuration" in line
    assert not (build.work / build.SMEM_RECORD).exists()


def test_the_fork_default_0_6_16_passes_with_fp8_kv(tmp_path: Path, nvcc: Path) -> None:
    build = _build(tmp_path, nvcc, "0.6.16", "fp8", None)
    build.check_flashinfer_smem()
    assert json.loads((build.work / build.SMEM_RECORD).read_text())["sizeof_fp8_kv"] == 65_536
