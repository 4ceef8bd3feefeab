"""files/runtime_build.py without a host: the fork's requirements with our pins winning, and FlashInfer's
fix applied and verified by outcome (against the sandbox's stand-in headers and diffs)."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.sandbox.fixtures.pkg_index import fixes, standins

REPO = Path(__file__).resolve().parents[2]
PREFILL = "include/flashinfer/attention/prefill.cuh"
PERSISTENT = "include/flashinfer/attention/persistent.cuh"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runtime_build", REPO / "files" / "runtime_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rb = _load()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- requirements ---------------------------------------------------------------------------------------


def test_requirements_follow_includes_and_drop_options(tmp_path: Path) -> None:
    (tmp_path / "common.txt").write_text("regex  # tokenizers\nnumpy<2.4\n--extra-index-url https://x/simple\n")
    (tmp_path / "cuda.txt").write_text("-r common.txt\n# CUDA\ntorch==2.11.0\nflashinfer-python==0.6.8.post1\n")
    assert rb.requirement_lines(tmp_path / "cuda.txt") == [
        "regex",
        "numpy<2.4",
        "torch==2.11.0",
        "flashinfer-python==0.6.8.post1",
    ]


def test_overrides_replace_the_forks_lines_and_pins_sit_beside_its_bounds() -> None:
    fork = [
        "torch==2.11.0",
        'Flashinfer_Python==0.6.8.post1 ; platform_machine == "x86_64"',
        "flashinfer-cubin==0.6.8.post1",
        "numpy<2.4",
        "nvidia-cutlass-dsl==4.4.2",
        "setuptools>=77.0.3,<81.0.0",
        "regex",
        "regex",
    ]
    pins = {"torch": "2.11.0", "flashinfer-python": "0.6.14", "numpy": "2.3.5"}
    overrides = {"nvidia-cutlass-dsl": "==4.5.2"}
    replace = ["flashinfer-python", "nvidia-cutlass-dsl"]
    merged = rb.merge_requirements(fork, pins, overrides, replace, ["flashinfer-cubin", "flashinfer-jit-cache"])
    assert merged == [
        "torch==2.11.0",  # the fork's bound stays: pip checks our pin against it
        "numpy<2.4",
        "setuptools>=77.0.3,<81.0.0",
        "regex",
        "torch==2.11.0",
        "flashinfer-python==0.6.14",
        "numpy==2.3.5",
        "nvidia-cutlass-dsl==4.5.2",
    ]


def test_the_forks_runtime_requirements_must_exist(tmp_path: Path) -> None:
    with pytest.raises(rb.BuildError, match="requirements/cuda.txt is missing"):
        rb.fork_requirement_files(tmp_path)
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "cuda.txt").write_text("torch\n")
    (tmp_path / "requirements" / "build.txt").write_text("cmake\n")
    assert [p.name for p in rb.fork_requirement_files(tmp_path)] == ["build.txt", "cuda.txt"]


def test_urls_are_redacted_in_the_log() -> None:
    assert (
        rb.redact("pip from https://user:token@mirror.example/simple/") == "pip from https://***@mirror.example/simple/"
    )


# ---- FlashInfer's fix, verified by outcome --------------------------------------------------------------


def _installed(tmp_path: Path, version: str) -> Path:
    """A flashinfer data dir as the stand-in wheel of `version` installs it."""
    prefill, persistent = standins.FLASHINFER_HEADERS[version]
    data = tmp_path / "site" / "flashinfer" / "data"
    for rel, name in ((PREFILL, prefill), (PERSISTENT, persistent)):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(standins.HEADERS / name, data / rel)
    return data


def _fix_files(pr: str) -> dict[str, dict[str, str]]:
    fix = next(f for f in fixes.FIXES if f.pr == pr)
    return {
        rel: {"before": _sha((standins.HEADERS / a).read_bytes()), "after": _sha((standins.HEADERS / b).read_bytes())}
        for rel, (a, b) in fix.files.items()
    }


def _diff(tmp_path: Path, pr: str) -> Path:
    path = tmp_path / f"{pr}.diff"
    path.write_bytes(fixes.diff(next(f for f in fixes.FIXES if f.pr == pr)))
    return path


def test_pr3621_applies_to_0614_and_lands_verified(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files("3621")
    assert rb.classify(rb.header_hashes(data, files), files) == "before"
    patched = rb.apply_in_scratch(_diff(tmp_path, "3621"), data, files, tmp_path / "scratch")
    assert rb.classify(rb.header_hashes(data, files), files) == "before"  # nothing installed yet
    rb.install_patched(patched, data)
    assert rb.classify(rb.header_hashes(data, files), files) == "after"
    assert not list(data.rglob("*.vllm-rig-new"))


def test_pr3526_applies_to_0615_only_with_both_headers(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.15")
    files = _fix_files("3526")
    rb.install_patched(rb.apply_in_scratch(_diff(tmp_path, "3526"), data, files, tmp_path / "scratch"), data)
    assert rb.classify(rb.header_hashes(data, files), files) == "after"


def test_a_diff_for_another_release_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    before = (data / PREFILL).read_bytes()
    with pytest.raises(rb.BuildError, match="does not apply"):
        rb.apply_in_scratch(_diff(tmp_path, "3526"), data, _fix_files("3621"), tmp_path / "scratch")
    assert (data / PREFILL).read_bytes() == before


def test_an_altered_result_hash_is_caught_and_nothing_changes(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    before = (data / PREFILL).read_bytes()
    files = _fix_files("3621")
    files[PREFILL]["after"] = "0" * 64
    with pytest.raises(rb.BuildError, match="did not produce the known result"):
        rb.apply_in_scratch(_diff(tmp_path, "3621"), data, files, tmp_path / "scratch")
    assert (data / PREFILL).read_bytes() == before


def test_an_altered_diff_is_caught(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    diff = _diff(tmp_path, "3621")
    text = diff.read_text()
    diff.write_text(
        text.replace(
            "+  constexpr uint32_t smem_sample_lo_mma = 128;", "+  constexpr uint32_t smem_sample_lo_mma = 64;", 1
        )
    )
    with pytest.raises(rb.BuildError, match="did not produce the known result"):
        rb.apply_in_scratch(diff, data, _fix_files("3621"), tmp_path / "scratch")


def test_headers_of_another_build_classify_as_other(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.12")
    files = _fix_files("3621")
    assert rb.classify(rb.header_hashes(data, files), files) == "other"
    half = _installed(tmp_path / "half", "0.6.15")
    files = _fix_files("3526")
    shutil.copyfile(standins.HEADERS / "prefill-0.6.16.cuh", half / PREFILL)  # one of two headers patched
    assert rb.classify(rb.header_hashes(half, files), files) == "other"


# ---- FlashQLA made importable on SM75 ----------------------------------------------------------------------

# A package shaped like FlashQLA-SM70-SM75 (our own text): the top level imports the SM90 path, which
# raises on any other GPU; the legacy backend beside it is what SM75 uses.
FAKE_FLASHQLA = {
    "flash_qla/__init__.py": '__version__ = "0.1.0"\n\nfrom flash_qla.ops.gated_delta_rule.chunk import (\n'
    "    sm90_fwd,\n    sm90_bwd as backward,\n)\n\n__all__ = ['sm90_fwd', 'backward']\n",
    "flash_qla/ops/__init__.py": "from .gated_delta_rule import sm90_fwd\n",
    "flash_qla/ops/gated_delta_rule/__init__.py": "from .chunk import sm90_fwd\n",
    "flash_qla/ops/gated_delta_rule/chunk/__init__.py": "raise ValueError('FlashQLA supports sm90 only')\n",
    "flash_qla/ops/gated_delta_rule/legacy/__init__.py": "",
    "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py": "def _load_ext():\n    return 'upstream'\n",
    "flash_qla/ops/gated_delta_rule/legacy/csrc/gdn_forward.cu": "// upstream\n",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def _legacy_import(root: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import flash_qla; from flash_qla.ops.gated_delta_rule.legacy import sm_legacy; "
        "print(sm_legacy._load_ext(), flash_qla.sm90_fwd)"
    )
    return subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(root)}, capture_output=True, text=True)


def test_flashqla_sm90_imports_become_optional(tmp_path: Path) -> None:
    root = _tree(tmp_path / "qla", FAKE_FLASHQLA)
    assert "sm90 only" in _legacy_import(root).stderr  # as the upstream tree fails on SM75
    changed = rb.prepare_flashqla(root, tmp_path / "fork-without-assets")
    assert len(changed) == 3 and all("SM90 imports made optional" in c for c in changed)
    result = _legacy_import(root)
    assert result.returncode == 0 and result.stdout.split() == ["upstream", "None"], result.stderr
    assert rb.prepare_flashqla(root, tmp_path / "fork-without-assets") == []  # once is enough
    top = (root / "flash_qla/__init__.py").read_text()
    assert "sm90_fwd = backward = None" in top and top.startswith('__version__ = "0.1.0"')


def test_the_forks_flashqla_patches_are_copied_in(tmp_path: Path) -> None:
    root = _tree(tmp_path / "qla", FAKE_FLASHQLA)
    fork = _tree(
        tmp_path / "fork",
        {
            "tools/flashqla_sm75_patches/sm_legacy.py": "def _load_ext():\n    return 'fork'\n",
            "tools/flashqla_sm75_patches/gdn_forward.cu": "// fork\n",
        },
    )
    changed = rb.prepare_flashqla(root, fork)
    assert "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py from the fork's tools/flashqla_sm75_patches" in changed
    assert (root / "flash_qla/ops/gated_delta_rule/legacy/csrc/gdn_forward.cu").read_text() == "// fork\n"
    assert _legacy_import(root).stdout.split()[0] == "fork"


def test_a_flashqla_without_sm90_imports_is_left_alone(tmp_path: Path) -> None:
    root = _tree(tmp_path / "qla", {"flash_qla/__init__.py": '"""stand-in"""\n'})
    assert rb.prepare_flashqla(root, tmp_path / "fork") == []
