"""vllm_rig/host/flashinfer_smem.py without a CUDA compiler: the sizes read from the probe's output, the verdict
against SM75's 65,536 B and its one line, the compile command, and the whole probe with a stand-in nvcc that
"compiles" into a program printing given sizes. tests/real/test_real_flashinfer_smem.py runs it with the real
nvcc against the real wheels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vllm_rig.host import flashinfer_smem as fs


def sizes(fp16_base: int, fp8_base: int, fp8_row: int = 1024) -> fs.Sizes:
    """A size table as the real wheels' is: a fixed part plus a cost per KV row (FP16 KV: 1,024 B a row)."""
    rows = {"fp16": (fp16_base, 1024), "fp8": (fp8_base, fp8_row)}
    return fs.Sizes({(kv, tile): base + tile * row for kv, (base, row) in rows.items() for tile in fs.TILES})


# Measured (nvcc 13.0.88, the PyPI wheels): the fixed part is the 32,768 B Q tile plus each release's padding.
V0_6_8 = sizes(32_768, 32_768, fp8_row=512)  # FP8 KV kept as 1 byte: the dispatcher picks 64 rows
V0_6_12 = sizes(32_800, 32_800, fp8_row=512)  # the 1-byte k_sf_smem placeholder, padded to 32 B
V0_6_14 = sizes(32_848, 32_832)  # FP8 repack staging: FP8 KV costs what FP16 does, 32 rows
V0_6_16 = sizes(32_768, 32_768)


def _lines(s: fs.Sizes) -> str:
    return "".join(f"{kv} {tile} {size}\n" for (kv, tile), size in s.table.items())


def test_the_probe_prints_every_dispatchable_tile_at_the_sm75_shape() -> None:
    assert "SharedStorageQKVO<1, 64, CTA_TILE_KV, 256, 256, half, KV, half>" in fs.PROBE_SOURCE
    assert 'print<half>("fp16")' in fs.PROBE_SOURCE and 'print<__nv_fp8_e4m3>("fp8")' in fs.PROBE_SOURCE
    assert all(f"Tile<KV, {tile}>" in fs.PROBE_SOURCE for tile in fs.TILES)
    assert "#include <flashinfer/attention/prefill.cuh>" in fs.PROBE_SOURCE


def test_parse_sizes_reads_the_table_in_any_order_among_other_lines() -> None:
    lines = _lines(V0_6_14).splitlines()
    assert fs.parse_sizes("a warning\n" + "\n".join(reversed(lines)) + "\n") == V0_6_14


@pytest.mark.parametrize(
    ("s", "fp16", "fp8", "tiles"),
    [
        (V0_6_8, 65_536, 65_536, (32, 64)),
        (V0_6_12, 65_568, 65_568, (32, 64)),  # at a fixed 32 rows its FP8 tile would read 49,184
        (V0_6_14, 65_616, 65_600, (32, 32)),
        (V0_6_16, 65_536, 65_536, (32, 32)),
    ],
)
def test_the_size_that_counts_is_at_the_tile_the_dispatcher_picks(
    s: fs.Sizes, fp16: int, fp8: int, tiles: tuple[int, int]
) -> None:
    assert (s.fp16, s.fp8) == (fp16, fp8)
    assert (s.tile("fp16"), s.tile("fp8")) == tiles


@pytest.mark.parametrize(
    "output", ["", "fp16 32 65536\nfp8 32 65536\n", _lines(V0_6_16).replace("fp8 128", "fp8 x"), "FP16 16 1\n"]
)
def test_parse_sizes_refuses_an_incomplete_table(output: str) -> None:
    with pytest.raises(fs.ProbeError, match="no complete fp16/fp8 size table"):
        fs.parse_sizes(output)


@pytest.mark.parametrize(
    ("dtype", "kind"), [("auto", "fp16"), ("fp8", "fp8"), ("fp8_e4m3", "fp8"), ("fp8_e5m2", "fp8")]
)
def test_kv_kind(dtype: str, kind: str) -> None:
    assert fs.kv_kind(dtype) == kind


def test_kv_kind_refuses_int8() -> None:
    with pytest.raises(ValueError, match="int8"):
        fs.kv_kind("int8")


@pytest.mark.parametrize("kv", ["fp16", "fp8"])
def test_exactly_the_limit_fits(kv: str) -> None:
    assert fs.verdict("0.6.16.post3", V0_6_16, kv) is None
    assert fs.verdict("0.6.8.post1", V0_6_8, kv) is None


@pytest.mark.parametrize("kv", ["fp16", "fp8"])
def test_padding_over_the_limit_does_not_fit(kv: str) -> None:
    assert fs.verdict("0.6.12", V0_6_12, kv) is not None
    assert fs.verdict("0.6.14", V0_6_14, kv) is not None


def test_only_the_served_kv_caches_size_counts() -> None:
    s = sizes(32_769, 32_768)  # FP16 one byte over, FP8 exactly at the limit
    assert fs.verdict("x", s, "fp8") is None
    assert fs.verdict("x", s, "fp16") is not None


def test_pr_3621_sizes_from_samples_a_16_row_tile_fine_for_fp16_invalid_for_fp8() -> None:
    """0.6.14 + PR 3621 keeps the 0.6.14 struct (measured: the same sizes) but sizes its tile from the struct:
    base 32,848 / 32,832 B + 16,384 B a step leaves room for one step."""
    assert (V0_6_14.tile("fp16", exact=True), V0_6_14.tile("fp8", exact=True)) == (16, 16)
    assert (V0_6_14.of("fp16", exact=True), V0_6_14.of("fp8", exact=True)) == (49_232, 49_216)
    assert fs.verdict("0.6.14", V0_6_14, "fp16", exact=True) is None
    line = fs.verdict("0.6.14", V0_6_14, "fp8", exact=True)
    assert line is not None and "invalid FP8 configuration" in line
    assert fs.verdict("0.6.16.post3", V0_6_16, "fp8", exact=True) is None  # no padding: the same tile either way


def test_the_ok_line_names_the_tile() -> None:
    assert fs.ok_line("0.6.8.post1", V0_6_8, "fp8") == (
        "FlashInfer 0.6.8.post1's head-dim-256 prefill tile for the FP8 KV cache is 65,536 B (64 KV rows), "
        "within SM75's 65,536 B per block"
    )


def test_a_one_step_fp8_tile_is_invalid_even_when_it_fits() -> None:
    s = sizes(32_768, 32_768, fp8_row=1536)  # (65,536 - 32,768) / 24,576: one step, 16 rows
    assert s.tile("fp8") == 16 and s.fp8 <= fs.LIMIT
    line = fs.verdict("x", s, "fp8")
    assert line is not None and "only tile that fits (16 rows) is an invalid FP8 configuration" in line


def test_no_tile_at_all_does_not_fit() -> None:
    s = sizes(32_768, 32_768, fp8_row=4096)  # 65,536 B a step: not one fits beside the Q tile
    assert s.tile("fp8") == 0
    assert fs.verdict("x", s, "fp8") is not None


def test_the_error_line_says_version_sizes_limit_and_what_to_do() -> None:
    line = fs.verdict("0.6.14", V0_6_14, "fp8")
    assert line is not None and "\n" not in line
    assert "FlashInfer 0.6.14" in line
    assert "65,616 B (FP16 KV)" in line and "65,600 B (FP8 KV)" in line
    assert "SM75 allows 65,536 B per block" in line and "with the FP8 KV cache served" in line
    assert "0.6.8.post1 or >= 0.6.16" in line


def test_include_dirs_take_the_vendored_cccl_only_where_the_wheel_has_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "include").mkdir(parents=True)
    assert fs.include_dirs(data) == [data / "include"]  # 0.6.8.post1: the toolkit's CCCL
    for d in fs.CCCL_DIRS:
        (data / d).mkdir(parents=True)
    assert fs.include_dirs(data) == [
        data / "include",
        data / "cccl/libcudacxx/include",
        data / "cccl/cub",
        data / "cccl/thrust",
    ]


def test_compile_command(tmp_path: Path) -> None:
    nvcc = tmp_path / "cu13" / "bin" / "nvcc"
    data = tmp_path / "data"
    cmd = fs.compile_command(nvcc, data, tmp_path / "p.cu", tmp_path / "p")
    assert cmd == [str(nvcc), "-std=c++17", "-arch=sm_75", f"-I{data / 'include'}", str(tmp_path / "p.cu"), "-o"] + [
        str(tmp_path / "p")
    ]
    (tmp_path / "cu13" / "lib").mkdir(parents=True)  # the PyPI toolkit's lib/ (no lib64 yet)
    assert f"-L{tmp_path / 'cu13' / 'lib'}" in fs.compile_command(nvcc, data, tmp_path / "p.cu", tmp_path / "p")


# ---- the whole probe, with stand-ins for the runtime's python and nvcc --------------------------------------


def _site(root: Path, version: str | None = "0.6.16.post3", header: bool = True) -> Path:
    """A site-packages holding a flashinfer package (importing it fails: the probe must not import it)."""
    pkg = root / "flashinfer"
    (pkg / "data" / "include" / "flashinfer" / "attention").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the probe must not import flashinfer')\n")
    if header:
        (pkg / "data" / fs.HEADER).write_text("// prefill.cuh stand-in\n")
    if version:
        info = root / f"flashinfer_python-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return root


def _python(tmp_path: Path, site: Path) -> Path:
    """The runtime's python: this interpreter with `site` on its path."""
    path = tmp_path / "python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def _nvcc(tmp_path: Path, printed: str = _lines(V0_6_16), rc: int = 0) -> Path:
    """An nvcc that checks the probe's flags and writes, as `-o`, a program printing `printed`."""
    nvcc = tmp_path / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    (tmp_path / "printed.txt").write_text(printed)
    program = f"#!/bin/sh\nexec cat {tmp_path / 'printed.txt'}\n"
    nvcc.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'nvcc-args.json')!r}, 'w'))\n"
        f"if {rc}:\n    print('probe.cu(4): error: no SharedStorageQKVO here', file=sys.stderr); sys.exit({rc})\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n"
        f"open(out, 'w').write({program!r})\n"
        "os.chmod(out, 0o755)\n"
    )
    nvcc.chmod(0o755)
    return nvcc


def test_probe_finds_the_package_compiles_and_reads_both_sizes(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    nvcc = _nvcc(tmp_path, _lines(V0_6_14))
    installed, found = fs.probe(_python(tmp_path, site), nvcc)
    assert installed == fs.Installed(site / "flashinfer", "0.6.16.post3")
    assert found == V0_6_14
    args = json.loads((tmp_path / "nvcc-args.json").read_text())
    assert args[:3] == ["-std=c++17", "-arch=sm_75", f"-I{site / 'flashinfer' / 'data' / 'include'}"]
    assert args[-3].endswith("probe.cu")


def test_record_keeps_what_the_start_check_compares(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    installed, found = fs.probe(_python(tmp_path, site), _nvcc(tmp_path))
    rec = fs.record(installed, found, "fp8")
    assert rec == {
        "flashinfer_version": "0.6.16.post3",
        "prefill_cuh_sha256": fs.sha256_of(site / "flashinfer" / "data" / fs.HEADER),
        "kv": "fp8",
        "sizeof_fp16_kv": 65_536,
        "sizeof_fp8_kv": 65_536,
        "cta_tile_kv": {"fp16": 32, "fp8": 32},
        "limit": 65_536,
        "fits": True,
    }


def test_no_flashinfer_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(fs.ProbeError, match="flashinfer is not installed"):
        fs.probe(_python(tmp_path, tmp_path / "empty"), _nvcc(tmp_path))


def test_no_header_is_one_line(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", header=False)
    with pytest.raises(fs.ProbeError, match="has no JIT header"):
        fs.probe(_python(tmp_path, site), _nvcc(tmp_path))


def test_a_compile_error_names_the_compiler_and_its_last_line(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    with pytest.raises(fs.ProbeError, match="could not compile the probe.*no SharedStorageQKVO here"):
        fs.probe(_python(tmp_path, site), _nvcc(tmp_path, rc=2))


def test_a_missing_compiler_is_one_line(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    with pytest.raises(fs.ProbeError, match="could not run"):
        fs.probe(_python(tmp_path, site), tmp_path / "no-nvcc")


@pytest.mark.parametrize(
    ("printed", "kv", "says"),
    [
        (_lines(V0_6_16), "fp8", None),
        (_lines(V0_6_14), "fp8", "FlashInfer 0.6.16.post3's head-dim-256 prefill tile"),
        (_lines(V0_6_14), "fp16", "with the FP16 KV cache served"),
    ],
)
def test_the_probe_compiles_and_judges_the_installed_headers(
    tmp_path: Path, printed: str, kv: str, says: str | None
) -> None:
    installed, sizes = fs.probe(_python(tmp_path, _site(tmp_path / "site")), _nvcc(tmp_path, printed))
    failed = fs.verdict(installed.version, sizes, kv)
    if says is None:
        assert failed is None
    else:
        assert failed is not None and says in failed and len(failed.splitlines()) == 1
    assert fs.record(installed, sizes, kv)["fits"] is (failed is None)
