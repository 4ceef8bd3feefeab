"""files/runtime/check-flashinfer-pr3621-sm75.sh, the service's ExecStartPre: it passes only when the headers
FlashInfer's JIT compiles cannot overflow SM75's shared memory, and no flashinfer-jit-cache is installed.

Against the sandbox's stand-in headers always; against the real wheels when they are at hand (not in CI):

    for v in 0.6.12 0.6.14 0.6.15; do pip download --no-deps -d /tmp/fi flashinfer-python==$v; done
    VLLM_RIG_REAL_FLASHINFER_WHEELS=/tmp/fi [VLLM_RIG_REAL_FIX_FILES=/tmp/raw] pytest this file

VLLM_RIG_REAL_FIX_FILES is a local copy of the fixed headers laid out as raw content is
(<commit>/include/flashinfer/attention/prefill.cuh, ...), e.g. from a FlashInfer clone:
`git show <commit>:<path> > /tmp/raw/<commit>/<path>` for each file in group_data's flashinfer_sm75_patches.
With it, the build script puts group_data's fixes on the real wheels and the check must pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.sandbox.fixtures.pkg_index import standins
from tests.unit.groupdata import group_data
from vllm_rig.host import runtime_build

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "files" / "runtime" / "check-flashinfer-pr3621-sm75.sh"
PREFILL = "flashinfer/data/include/flashinfer/attention/prefill.cuh"
PR3621_BEFORE = "9bb66eeae98340e72a7cef68691d7198a8538d58f2fc64f08f77a314a9f4d98c"  # 0.6.14 prefill.cuh
PR3621_AFTER = "3cda6a4f0fed5b3f89686933ecb0b3653ece8db08a7980d991d2192d4d30f784"


def _site(root: Path, version: str, header: Path, jit_cache: str | None = None) -> Path:
    """A site-packages dir holding flashinfer-python `version` with `header` as its prefill.cuh."""
    (root / PREFILL).parent.mkdir(parents=True, exist_ok=True)
    (root / "flashinfer" / "__init__.py").write_text("raise ImportError('the check must not import flashinfer')\n")
    shutil.copyfile(header, root / PREFILL)
    _dist_info(root, "flashinfer_python", version)
    if jit_cache:
        _dist_info(root, "flashinfer_jit_cache", jit_cache)
    return root


def _dist_info(root: Path, dist: str, version: str) -> None:
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")


def _check(site: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    return subprocess.run(["bash", str(CHECK), sys.executable], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("version", "header", "passes", "says"),
    [
        ("0.6.8.post1", "prefill-0.6.8.post1.cuh", True, "no fix needed"),
        ("0.6.12", "prefill-0.6.12.cuh", False, "overflows SM75"),
        ("0.6.14", "prefill-0.6.14.cuh", False, "overflows SM75"),
        ("0.6.14", "prefill-0.6.14+pr3621.cuh", True, "carries PR 3621"),
        ("0.6.15", "prefill-0.6.15.cuh", False, "overflows SM75"),
        ("0.6.16", "prefill-0.6.16.cuh", True, "carries PR 3526"),
    ],
)
def test_stand_in_headers(tmp_path: Path, version: str, header: str, passes: bool, says: str) -> None:
    result = _check(_site(tmp_path, version, standins.HEADERS / header))
    assert (result.returncode == 0) is passes, result.stdout + result.stderr
    assert says in result.stdout + result.stderr
    assert len((result.stdout + result.stderr).strip().splitlines()) == 1  # one line, for the journal


def test_jit_cache_fails_even_with_the_fix(tmp_path: Path) -> None:
    site = _site(tmp_path, "0.6.14", standins.HEADERS / "prefill-0.6.14+pr3621.cuh", jit_cache="0.6.14")
    result = _check(site)
    assert result.returncode == 1 and "flashinfer-jit-cache 0.6.14 is installed" in result.stderr


def test_no_flashinfer_fails(tmp_path: Path) -> None:
    result = _check(tmp_path)
    assert result.returncode == 1 and "flashinfer is not installed" in result.stderr


def test_default_python_is_the_current_runtime(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(CHECK, bin_dir / CHECK.name)
    result = subprocess.run(["bash", str(bin_dir / CHECK.name)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and f"no runtime python at {bin_dir}/../current/venv/bin/python" in result.stderr


# ---- the real wheels (when provided) ---------------------------------------------------------------------

REAL = os.environ.get("VLLM_RIG_REAL_FLASHINFER_WHEELS")
real = pytest.mark.skipif(not REAL, reason="set VLLM_RIG_REAL_FLASHINFER_WHEELS to a dir of flashinfer-python wheels")


def _real_site(tmp_path: Path, version: str) -> Path:
    wheel = next(Path(REAL or ".").glob(f"flashinfer_python-{version}-*.whl"), None)
    if wheel is None:
        pytest.skip(f"no flashinfer-python {version} wheel in {REAL}")
    site = tmp_path / version
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


@real
def test_real_0612_is_refused(tmp_path: Path) -> None:
    result = _check(_real_site(tmp_path, "0.6.12"))
    assert result.returncode == 1 and "overflows SM75" in result.stderr


@real
def test_real_0614_is_refused_before_pr3621_and_passes_after(tmp_path: Path) -> None:
    site = _real_site(tmp_path, "0.6.14")
    header = site / PREFILL
    assert hashlib.sha256(header.read_bytes()).hexdigest() == PR3621_BEFORE
    result = _check(site)
    assert result.returncode == 1 and "overflows SM75" in result.stderr
    _put_real_fix(site, "0.6.14")
    assert hashlib.sha256(header.read_bytes()).hexdigest() == PR3621_AFTER
    result = _check(site)
    assert result.returncode == 0 and "carries PR 3621" in result.stdout


@real
def test_real_0615_is_refused_before_pr3526_and_passes_after(tmp_path: Path) -> None:
    site = _real_site(tmp_path, "0.6.15")
    result = _check(site)
    assert result.returncode == 1 and "overflows SM75" in result.stderr
    _put_real_fix(site, "0.6.15")
    result = _check(site)
    assert result.returncode == 0 and "carries PR 3526" in result.stdout


RAW = "https://raw.githubusercontent.com/flashinfer-ai/flashinfer/"


def _put_real_fix(site: Path, version: str) -> None:
    """group_data's fix for `version`, fetched from VLLM_RIG_REAL_FIX_FILES in place of raw content and put
    in by the build script's own functions (base checked, each download checked, then replaced)."""
    fixed = os.environ.get("VLLM_RIG_REAL_FIX_FILES")
    if not fixed:
        pytest.skip("set VLLM_RIG_REAL_FIX_FILES to the fixed headers (raw-content layout) to check the fix too")
    rb = _runtime_build()
    files = {
        path: {**f, "url": (Path(fixed) / f["url"].removeprefix(RAW)).as_uri()}
        for path, f in group_data("all")["flashinfer_sm75_patches"][version]["files"].items()
    }
    assert all(f["url"].endswith(path) for path, f in files.items())
    data = site / "flashinfer" / "data"
    assert rb.classify(rb.header_hashes(data, files), files) == "before"
    rb.install_patched(rb.fetch_fixed(files, site.parent / f"scratch-{version}"), data)
    assert rb.classify(rb.header_hashes(data, files), files) == "after"


def _runtime_build():
    return runtime_build


# ---- what the build proved (runtime.json's flashinfer_smem, vllm_rig/host/flashinfer_smem.py) ----------------


def _runtime(tmp_path: Path, site: Path, record: dict | None) -> Path:
    """<runtime>/venv/bin/python (this interpreter, `site` on its path) beside <runtime>/runtime.json."""
    python = tmp_path / "rt" / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    body = {"name": "rt"} if record is None else {"name": "rt", "flashinfer_smem": record}
    (tmp_path / "rt" / "runtime.json").write_text(json.dumps(body))
    return python


def _proven(site: Path, version: str, **changes: object) -> dict:
    sha = hashlib.sha256((site / PREFILL).read_bytes()).hexdigest()
    record = {
        "flashinfer_version": version,
        "prefill_cuh_sha256": sha,
        "kv": "fp8",
        "sizeof_fp16_kv": 65536,
        "sizeof_fp8_kv": 65536,
        "cta_tile_kv": {"fp16": 32, "fp8": 32},
        "limit": 65536,
        "fits": True,
    }
    return {**record, **changes}


def _check_with(python: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CHECK), str(python)], capture_output=True, text=True, timeout=60)


def test_the_proven_headers_pass_and_say_so(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", "0.6.16", standins.HEADERS / "prefill-0.6.16.cuh")
    result = _check_with(_runtime(tmp_path, site, _proven(site, "0.6.16")))
    assert result.returncode == 0, result.stderr
    assert "carries PR 3526 (scale-factor buffers only when used); the build compiled this prefill.cuh" in result.stdout
    assert result.stdout.strip().endswith("FP8 KV tile 65536 B (32 rows) <= 65,536 B")
    assert len(result.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"prefill_cuh_sha256": "0" * 64}, "is not the one the build compiled and proved fits SM75"),
        ({"flashinfer_version": "0.6.18"}, "(FlashInfer 0.6.18, "),
        ({"fits": False}, "does not fit SM75's 65,536 B"),
    ],
)
def test_headers_other_than_the_proven_ones_fail(tmp_path: Path, changes: dict, says: str) -> None:
    site = _site(tmp_path / "site", "0.6.16", standins.HEADERS / "prefill-0.6.16.cuh")
    result = _check_with(_runtime(tmp_path, site, _proven(site, "0.6.16", **changes)))
    assert result.returncode == 1 and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_runtime_built_before_the_probe_is_judged_by_the_markers_alone(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", "0.6.16", standins.HEADERS / "prefill-0.6.16.cuh")
    result = _check_with(_runtime(tmp_path, site, None))
    assert result.returncode == 0 and result.stdout.strip().endswith(
        "carries PR 3526 (scale-factor buffers only when used)"
    )


def test_the_pr_3621_exit_checks_the_record_too(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", "0.6.14", standins.HEADERS / "prefill-0.6.14+pr3621.cuh")
    result = _check_with(_runtime(tmp_path, site, _proven(site, "0.6.14", prefill_cuh_sha256="1" * 64)))
    assert result.returncode == 1 and "is not the one the build compiled" in result.stderr
