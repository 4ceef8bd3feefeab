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

FIXED = fs.Sizes(65_536, 65_536)  # 0.6.16.post3, measured
BROKEN = fs.Sizes(65_616, 65_600)  # 0.6.14, measured


def test_the_probe_prints_both_sizes_at_the_sm75_tile() -> None:
    assert "SharedStorageQKVO<1, 64, 32, 256, 256, half, KV, half>" in fs.PROBE_SOURCE
    assert "Tile<half>" in fs.PROBE_SOURCE and "Tile<__nv_fp8_e4m3>" in fs.PROBE_SOURCE
    assert "#include <flashinfer/attention/prefill.cuh>" in fs.PROBE_SOURCE


@pytest.mark.parametrize(
    ("output", "sizes"),
    [
        ("fp16 65616\nfp8 65600\n", fs.Sizes(65_616, 65_600)),
        ("fp8 49152\nfp16 65536\n", fs.Sizes(65_536, 49_152)),  # any order
        ("a warning\nfp16 65536\nfp8 65536\n", FIXED),  # other lines are passed over
    ],
)
def test_parse_sizes(output: str, sizes: fs.Sizes) -> None:
    assert fs.parse_sizes(output) == sizes


@pytest.mark.parametrize("output", ["", "fp16 65536\n", "fp16 x\nfp8 1\n", "FP16 1\nFP8 1\n"])
def test_parse_sizes_refuses_what_is_not_both(output: str) -> None:
    with pytest.raises(fs.ProbeError, match="no fp16/fp8 sizes"):
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
    assert fs.verdict("0.6.16.post3", FIXED, kv) is None
    assert fs.verdict("0.6.8.post1", fs.Sizes(65_536, 49_152), kv) is None


def test_one_byte_over_does_not_fit() -> None:
    assert fs.verdict("x", fs.Sizes(65_537, 65_536), "fp8") is None  # only the served KV cache's size counts
    assert fs.verdict("x", fs.Sizes(65_537, 65_536), "fp16") is not None
    assert fs.verdict("x", fs.Sizes(65_536, 65_537), "fp8") is not None


def test_the_error_line_says_version_sizes_limit_and_what_to_do() -> None:
    line = fs.verdict("0.6.14", BROKEN, "fp8")
    assert line is not None and "\n" not in line
    assert "FlashInfer 0.6.14" in line
    assert "65,616 B (FP16 KV)" in line and "65,600 B (FP8 KV)" in line
    assert "65,536 B" in line and "FP8 KV cache served" in line
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


def _nvcc(tmp_path: Path, printed: str = "fp16 65536\nfp8 65536\n", rc: int = 0) -> Path:
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
    nvcc = _nvcc(tmp_path, "fp16 65616\nfp8 65600\n")
    installed, sizes = fs.probe(_python(tmp_path, site), nvcc)
    assert installed == fs.Installed(site / "flashinfer", "0.6.16.post3")
    assert sizes == BROKEN
    args = json.loads((tmp_path / "nvcc-args.json").read_text())
    assert args[:3] == ["-std=c++17", "-arch=sm_75", f"-I{site / 'flashinfer' / 'data' / 'include'}"]
    assert args[-3].endswith("probe.cu")


def test_record_keeps_what_the_start_check_compares(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    installed, sizes = fs.probe(_python(tmp_path, site), _nvcc(tmp_path))
    rec = fs.record(installed, sizes, "fp8")
    assert rec == {
        "flashinfer_version": "0.6.16.post3",
        "prefill_cuh_sha256": fs.sha256_of(site / "flashinfer" / "data" / fs.HEADER),
        "kv": "fp8",
        "sizeof_fp16_kv": 65_536,
        "sizeof_fp8_kv": 65_536,
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
    ("printed", "kv", "rc", "says"),
    [
        ("fp16 65536\nfp8 65536\n", "fp8_e4m3", 0, "ok: FlashInfer 0.6.16.post3"),
        ("fp16 65616\nfp8 65600\n", "fp8", 1, "FAIL: FlashInfer 0.6.16.post3's head-dim-256 prefill tile"),
        ("fp16 65616\nfp8 65600\n", "auto", 1, "for the FP16 KV cache served"),
        ("fp16 65536\nfp8 65536\n", "int8", 1, "no shared-memory probe for KV cache dtype 'int8'"),
    ],
)
def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], printed: str, kv: str, rc: int, says: str) -> None:
    python = _python(tmp_path, _site(tmp_path / "site"))
    nvcc = _nvcc(tmp_path, printed)
    assert fs.main(["--python", str(python), "--nvcc", str(nvcc), "--kv", kv]) == rc
    out = capsys.readouterr()
    said = (out.out + out.err).strip()
    assert says in said and len(said.splitlines()) == 1


def test_cli_json_is_the_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = _python(tmp_path, _site(tmp_path / "site"))
    assert fs.main(["--python", str(python), "--nvcc", str(_nvcc(tmp_path)), "--kv", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
