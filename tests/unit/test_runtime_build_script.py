"""vllm_rig/host/runtime_build.py without a host: the fork's requirements with our pins winning, and FlashInfer's
fix put in place and verified by outcome (against the sandbox's stand-in headers, served as raw files are)."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from tests.sandbox.fixtures.pkg_index import fixes, standins
from vllm_rig.host import runtime_build

REPO = Path(__file__).resolve().parents[2]
PREFILL = "include/flashinfer/attention/prefill.cuh"
PERSISTENT = "include/flashinfer/attention/persistent.cuh"


rb = runtime_build


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


def _served(tmp_path: Path) -> Path:
    """The stand-in fixed files laid out as the sandbox's file server serves them (raw content at a commit)."""
    root = tmp_path / "www"
    for rel, data in fixes.served().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _fix_files(tmp_path: Path, pr: str) -> dict[str, dict[str, str]]:
    """The fix's settings data: each fixed file's URL (file:// on the served tree) and sha256 before/after."""
    fix, root = fixes.fix(pr), _served(tmp_path)
    return {
        rel: {
            "url": (root / fix.raw_path(rel)).as_uri(),
            "before": _sha((standins.HEADERS / a).read_bytes()),
            "after": _sha((standins.HEADERS / b).read_bytes()),
        }
        for rel, (a, b) in fix.files.items()
    }


def _build(tmp_path: Path, data: Path, version: str, pr: str, files: dict[str, dict[str, str]]) -> ModuleType:
    """A Build whose step_flashinfer works on `data` (no venv: the data dir is given)."""
    spec = {
        "runtime": str(tmp_path / "runtime"),
        "cache": str(tmp_path / "cache"),
        "pins": {"flashinfer-python": version},
        "pip_index_url": None,
        "torch_index_url": "https://torch.example/whl/cu128",
        "flashinfer_fix": {"patch": f"pr{pr}", "files": files},
    }
    build = rb.Build(spec)
    build.flashinfer_data = lambda: data  # type: ignore[method-assign]
    return build


@pytest.fixture(autouse=True)
def _one_try(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rb, "DOWNLOAD_TRIES", 1)


def test_pr3621_lands_on_0614_verified(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    assert rb.classify(rb.header_hashes(data, files), files) == "before"
    fetched = rb.fetch_fixed(files, tmp_path / "scratch")
    assert rb.classify(rb.header_hashes(data, files), files) == "before"  # nothing installed yet
    rb.install_patched(fetched, data)
    assert rb.classify(rb.header_hashes(data, files), files) == "after"
    assert not list(data.rglob("*.vllm-rig-new"))


def test_the_step_puts_pr3526_on_0615_and_is_done_the_second_time(tmp_path: Path, capsys) -> None:
    data = _installed(tmp_path, "0.6.15")
    files = _fix_files(tmp_path, "3526")
    build = _build(tmp_path, data, "0.6.15", "3526", files)
    build.step_flashinfer()
    assert rb.classify(rb.header_hashes(data, files), files) == "after"
    fixed = _installed(tmp_path / "fixed", "0.6.16")
    assert all((data / rel).read_bytes() == (fixed / rel).read_bytes() for rel in files)
    assert not (build.work / "flashinfer-scratch").exists()
    out = capsys.readouterr().out
    assert f"downloading the fixed {PERSISTENT} from file://" in out and "pr3526's headers in place" in out
    build.step_flashinfer()
    assert "already carries pr3526 (headers verified)" in capsys.readouterr().out


def test_the_mirror_prefix_url_is_what_the_step_fetches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    asked = []
    real = rb.download
    monkeypatch.setattr(rb, "download", lambda url, dest: (asked.append(url), real(url, dest)))
    _build(tmp_path, data, "0.6.14", "3621", files).step_flashinfer()
    assert asked == [files[PREFILL]["url"]]


def _refused(tmp_path: Path, data: Path, version: str, pr: str, files: dict[str, dict[str, str]]) -> str:
    """The step's one-line error; every installed header is as it was."""
    before = {rel: (data / rel).read_bytes() for rel in (PREFILL, PERSISTENT)}
    with pytest.raises(rb.BuildError) as err:
        _build(tmp_path, data, version, pr, files).step_flashinfer()
    assert {rel: (data / rel).read_bytes() for rel in (PREFILL, PERSISTENT)} == before
    assert not list(data.rglob("*.vllm-rig-new"))
    message = str(err.value)
    assert "\n" not in message and message.endswith("the installed headers were not changed")
    return message


def test_another_releases_file_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    files[PREFILL]["url"] = _fix_files(tmp_path, "3526")[PREFILL]["url"]  # PR 3526's prefill.cuh for 0.6.14
    message = _refused(tmp_path, data, "0.6.14", "3621", files)
    assert f"c18a974a88b8c7da88be0338a7478636f1dffa17/{PREFILL} is not the known result for {PREFILL}" in message
    assert f"expected {files[PREFILL]['after']}" in message


def test_an_altered_file_is_refused(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    served = Path(files[PREFILL]["url"].removeprefix("file://"))
    served.write_text(served.read_text().replace("smem_sample_lo_mma = 128;", "smem_sample_lo_mma = 64;", 1))
    assert "is not the known result for" in _refused(tmp_path, data, "0.6.14", "3621", files)


def test_an_altered_result_hash_is_refused(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    files[PREFILL]["after"] = "0" * 64
    assert "expected " + "0" * 64 in _refused(tmp_path, data, "0.6.14", "3621", files)


def test_one_bad_file_of_two_leaves_both_headers_untouched(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.15")
    files = _fix_files(tmp_path, "3526")
    files[PREFILL]["after"] = "0" * 64  # persistent.cuh (first) downloads fine, prefill.cuh does not
    assert f"for {PREFILL}" in _refused(tmp_path, data, "0.6.15", "3526", files)


def test_a_url_that_serves_nothing_is_one_clear_error(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.14")
    files = _fix_files(tmp_path, "3621")
    files[PREFILL]["url"] = (tmp_path / "nowhere" / PREFILL).as_uri()
    assert "could not download file://" in _refused(tmp_path, data, "0.6.14", "3621", files)


def test_data_for_another_release_is_refused_before_any_download(tmp_path: Path, monkeypatch) -> None:
    data = _installed(tmp_path, "0.6.12")
    files = _fix_files(tmp_path, "3621")
    build = _build(tmp_path, data, "0.6.12", "3621", files)
    monkeypatch.setattr(build, "pip_locked", lambda *a: None)  # the reinstall gives the same 0.6.12 headers
    monkeypatch.setattr(rb, "download", lambda *a: pytest.fail("downloaded for the wrong release"))
    with pytest.raises(rb.BuildError, match="flashinfer-python 0.6.12 is not the release the pr3621 data describes"):
        build.step_flashinfer()
    assert _sha((data / PREFILL).read_bytes()) == _sha((standins.HEADERS / "prefill-0.6.12.cuh").read_bytes())


def test_headers_of_another_build_classify_as_other(tmp_path: Path) -> None:
    data = _installed(tmp_path, "0.6.12")
    files = _fix_files(tmp_path, "3621")
    assert rb.classify(rb.header_hashes(data, files), files) == "other"
    half = _installed(tmp_path / "half", "0.6.15")
    files = _fix_files(tmp_path, "3526")
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


def test_the_forks_patch_files_are_required_where_its_build_uses_them(tmp_path: Path) -> None:
    root = _tree(tmp_path / "qla", FAKE_FLASHQLA)
    fork = _tree(
        tmp_path / "fork",
        {
            "build.sh": 'python - "$FLASHQLA_DIR" "$ROOT/tools/flashqla_sm75_patches" <<PY\n',
            "tools/flashqla_sm75_patches/sm_legacy.py": "def _load_ext():\n    return 'fork'\n",
        },
    )
    with pytest.raises(rb.BuildError) as err:
        rb.prepare_flashqla(root, fork)
    line = str(err.value)
    assert "\n" not in line
    assert f"{fork}/tools/flashqla_sm75_patches/gdn_forward.cu is missing" in line
    assert "float32 only" in line and "fork_ref" in line
    (root / "flash_qla/ops/gated_delta_rule/legacy/csrc/gdn_forward.cu").unlink()
    _tree(fork, {"tools/flashqla_sm75_patches/gdn_forward.cu": "// fork\n"})
    with pytest.raises(rb.BuildError, match="legacy/csrc/gdn_forward.cu is missing, so the fork's"):
        rb.prepare_flashqla(root, fork)


def test_a_fork_whose_build_names_no_patches_needs_none(tmp_path: Path) -> None:
    root = _tree(tmp_path / "qla", FAKE_FLASHQLA)
    fork = _tree(tmp_path / "fork", {"build.sh": "uv pip install --no-build-isolation -e .\n"})
    assert not rb.fork_ships_flashqla_patches(fork)
    assert all("SM90 imports made optional" in c for c in rb.prepare_flashqla(root, fork))


# ---- FetchContent: local sources, disconnected --------------------------------------------------------


def _spec(tmp_path: Path, fetchcontent: dict[str, dict[str, str]]) -> dict:
    src = {name: str(tmp_path / "src" / name) for name in ("fork", "flashqla", "cutlass", "triton")}
    return {
        "runtime": str(tmp_path / "runtime"),
        "cache": str(tmp_path / "cache"),
        "cuda_home": "/usr/local/cuda-12.9",
        "arch_list": "7.5",
        "max_jobs": 3,
        "sources": src,
        "fetchcontent": fetchcontent,
        "validate_waive": ["flashinfer-cubin", "flashinfer_cubin"],
        "fingerprint": "f" * 64,
    }


def test_the_compile_gets_every_local_source_and_fetchcontent_disconnected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = {}
    for name, var in (("flashmla", "FLASH_MLA_SRC_DIR"), ("qutlass", "QUTLASS_SRC_DIR")):
        _tree(tmp_path / "deps" / name, {"README.md": name})
        deps[name] = {"env": var, "dir": str(tmp_path / "deps" / name)}
    monkeypatch.setenv("CMAKE_ARGS", "-DTRITON_BUILD_UT=OFF")
    env = rb.Build(_spec(tmp_path, deps)).compile_env()
    assert env["FLASH_MLA_SRC_DIR"] == deps["flashmla"]["dir"]
    assert env["QUTLASS_SRC_DIR"] == deps["qutlass"]["dir"]
    assert env["CMAKE_ARGS"].split() == ["-DTRITON_BUILD_UT=OFF", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"]
    assert env["VLLM_CUTLASS_SRC_DIR"].endswith("/src/cutlass") and env["TORCH_CUDA_ARCH_LIST"] == "7.5"


def test_fetchcontent_is_disconnected_even_with_nothing_extra_to_pass(tmp_path: Path) -> None:
    assert rb.fetchcontent_env({}, None) == {"CMAKE_ARGS": "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"}
    flag = "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"
    assert rb.fetchcontent_env({}, flag)["CMAKE_ARGS"] == flag  # not twice


def test_a_missing_fetchcontent_checkout_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "absent", tmp_path / "empty"):
        with pytest.raises(rb.BuildError) as err:
            rb.fetchcontent_env({"qutlass": {"env": "QUTLASS_SRC_DIR", "dir": str(path)}}, None)
        assert str(err.value) == (
            f"the qutlass source the fork's CMake would fetch (QUTLASS_SRC_DIR) is missing at {path}: the compile "
            "runs with FetchContent disconnected; re-run the deploy (its git checkouts fetch it)"
        )


# ---- the fork's validate_runtime_components.py ---------------------------------------------------------

VALIDATION_OUTPUT = """Runtime component validation
OK torch: /v/torch/__init__.py
FAIL flashinfer-cubin: not-installed
FAIL flashinfer_cubin: ModuleNotFoundError: No module named 'flashinfer_cubin'
{extra}
Runtime component validation failed:
  - flashinfer-cubin: not-installed
"""


def test_validation_passes_when_only_waived_checks_fail() -> None:
    out = VALIDATION_OUTPUT.format(extra="")
    assert rb.judge_validation(0, "Runtime component validation OK\n", []) == []
    waived = rb.judge_validation(1, out, ["flashinfer-cubin", "flashinfer_cubin"])
    assert waived == [
        "flashinfer-cubin: not-installed",
        "flashinfer_cubin: ModuleNotFoundError: No module named 'flashinfer_cubin'",
    ]


def test_validation_failure_names_the_failed_checks_in_one_line() -> None:
    out = VALIDATION_OUTPUT.format(extra="FAIL torch.ops._C.rms_norm: registered\nFAIL vllm._C: ImportError: x")
    with pytest.raises(rb.BuildError) as err:
        rb.judge_validation(1, out, ["flashinfer-cubin", "flashinfer_cubin"])
    assert str(err.value) == (
        "the fork's tools/validate_runtime_components.py failed (exit code 1): "
        "torch.ops._C.rms_norm: registered; vllm._C: ImportError: x"
    )
    with pytest.raises(rb.BuildError, match="exited 1 without a FAIL line: Traceback"):
        rb.judge_validation(1, "Traceback (most recent call last):\n", [])


def test_the_validate_step_runs_the_forks_script_as_build_sh_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(tmp_path, {})
    fork = Path(spec["sources"]["fork"])
    script = (
        "import os, sys\n"
        "print('cwd', os.getcwd()); print('argv', sys.argv[1:])\n"
        "for k in ('PYTHONPATH', 'FLASHQLA_DIR', 'VLLM_CUTLASS_SRC_DIR', 'TRITON_KERNELS_SRC_DIR'):\n"
        "    print(k, os.environ.get(k))\n"
        "print('FAIL torch.cuda: CUDA must be available'); sys.exit(1)\n"
    )
    _tree(fork, {"tools/validate_runtime_components.py": script})
    build = rb.Build(spec)
    build.python = Path(sys.executable)
    with pytest.raises(rb.BuildError, match=r"failed \(exit code 1\): torch.cuda: CUDA must be available$"):
        build.step_validate()
    log = capsys.readouterr().out
    assert f"cwd {fork}" in log and "argv []" in log and f"PYTHONPATH {fork}" in log
    env = build.validate_env()
    assert env["PYTHONPATH"] == str(fork) and env["FLASHQLA_DIR"] == spec["sources"]["flashqla"]
    assert env["TRITON_KERNELS_SRC_DIR"] == spec["sources"]["triton"] + "/python/triton_kernels/triton_kernels"
    (fork / "tools/validate_runtime_components.py").unlink()
    build.step_validate()  # an older tree without the script: nothing to run


def test_a_venv_whose_pip_was_cut_short_is_made_again(tmp_path: Path) -> None:
    """A reboot while `python -m venv` ran ensurepip (seen in the whole-rig reboot scenario) leaves a venv
    that imports `pip` but cannot run it; the resumed build must not take it as done."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    spec = {"runtime": str(tmp_path / "rt"), "cache": str(tmp_path / "cache"), "python": sys.executable}
    build = rb.Build({**spec, "python_version": version, "fingerprint": "f" * 64, "name": "x"})
    # What an interrupted ensurepip leaves: a venv whose pip has its __init__.py and no internals (made
    # without ensurepip here: the step under test runs the real one, about 8 s each time).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(build.venv)], check=True)
    site = next(build.venv.glob("lib/python*/site-packages"))
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text('__version__ = "24.0"\n')
    assert subprocess.run([str(build.python), "-c", "import pip"], check=False).returncode == 0
    build.step_venv()
    assert subprocess.run([str(build.python), "-m", "pip", "--version"], check=False).returncode == 0


# ---- the torch step -------------------------------------------------------------------------------------


def _torch_build(tmp_path: Path, installed: dict[str, str]) -> tuple[rb.Build, list]:
    from tests.unit.groupdata import profile_data
    from vllm_rig.stages.runtime.kinds.fork import runtime_pins
    from vllm_rig.stages.runtime.lanes import TORCH_LANE_PACKAGES, torch_exact_versions
    from vllm_rig.validation import load_settings

    s = load_settings({**profile_data(), "runtime_kind": "fork"})  # the fork's torch step: the torch index's lane
    spec = {"runtime": str(tmp_path / "rt"), "cache": str(tmp_path / "cache"), "fingerprint": "f" * 64}
    spec |= {
        "pins": runtime_pins(s),
        "torch_packages": list(TORCH_LANE_PACKAGES),
        "torch_exact": torch_exact_versions(s),
    }
    spec |= {"pip_index_url": None, "torch_index_url": s.torch_index_url}
    locked = {**spec["pins"], **spec["torch_exact"]}
    lane = "".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n" for n, v in locked.items())
    spec["lock"] = {"name": "fork.txt", "text": lane}
    build = rb.Build(spec)
    calls: list = []
    build.pip_locked = lambda args, env, what, names=None: calls.append((args, env))  # type: ignore[method-assign]
    build.installed = installed.get  # type: ignore[method-assign]
    return build, calls


def test_the_torch_step_asks_for_the_lanes_exact_builds_from_the_main_index_plus_the_torch_index(tmp_path) -> None:
    """The fork's build.sh: `pip install torch==2.11.0+cu128 ... --extra-index-url <torch index>`."""
    good = {"torch": "2.11.0+cu128", "torchvision": "0.26.0+cu128", "torchaudio": "2.11.0+cu128", "triton": "3.6.0"}
    build, calls = _torch_build(tmp_path, good)
    build.step_torch()
    [(args, env)] = calls
    assert args == ["install", "--no-deps"]  # the whole lock, --require-hashes (pip_locked), the lane's builds in it
    assert rb.lock_blocks(build.lock_text())["torch"].startswith("torch==2.11.0+cu128 ")
    assert "PIP_INDEX_URL" not in env  # pip's default index (or pip_index_url when set)
    assert env["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cu128"


@pytest.mark.parametrize("torch", ["2.11.0", "2.11.0+cu130", None])
def test_a_torch_of_another_local_version_fails_the_check_in_one_line(tmp_path, torch) -> None:
    """PyPI's torch 2.11.0 is the CUDA 13 build (no local version): the public part alone no longer passes."""
    installed = {"torchvision": "0.26.0+cu128", "torchaudio": "2.11.0+cu128", "triton": "3.6.0"}
    build, _ = _torch_build(tmp_path, {**installed, **({"torch": torch} if torch else {})})
    with pytest.raises(rb.BuildError) as err:
        build.step_torch()
    assert str(err.value) == f"torch is {torch or 'not installed'} in the venv, the torch lane's is 2.11.0+cu128"


# ---- import flashinfer with the overridden packages -----------------------------------------------------


def _venv_with(tmp_path: Path, cutlass_init: str | None) -> rb.Build:
    """A real venv holding a flashinfer that imports cutlass as the real one does (the sandbox stand-in's
    __init__.py), and an nvidia-cutlass-dsl 4.5.2 whose `cutlass` runs `cutlass_init` (None: not there)."""
    spec = {"runtime": str(tmp_path / "rt"), "cache": str(tmp_path / "c"), "fingerprint": "f" * 64}
    build = rb.Build({**spec, "cuda_home": str(tmp_path / "cuda"), "overrides": {"nvidia-cutlass-dsl": "==4.5.2"}})
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(build.venv)], check=True)
    site = next(build.venv.glob("lib/python*/site-packages"))
    standin = REPO / "tests/sandbox/fixtures/pkg_index/src/flashinfer/flashinfer"
    shutil.copytree(standin, site / "flashinfer")
    (site / "flashinfer" / "version.py").write_text('__version__ = "0.6.14"\n')  # standins.py writes it per wheel
    info = site / "nvidia_cutlass_dsl-4.5.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: 4.5.2\n")
    if cutlass_init is not None:
        (site / "cutlass").mkdir()
        (site / "cutlass" / "__init__.py").write_text(cutlass_init)
    return build


def test_flashinfer_imports_cutlass_beside_the_override(tmp_path: Path, capsys) -> None:
    _venv_with(tmp_path, "").check_flashinfer_import()
    out = capsys.readouterr().out
    assert "imports (imported cutlass) beside nvidia-cutlass-dsl 4.5.2" in out


def test_a_cutlass_that_breaks_flashinfers_import_fails_the_check_in_one_line(tmp_path: Path) -> None:
    """Only an ImportError is passed over by flashinfer; a cutlass-dsl that raises otherwise (a release
    that does not fit this torch, say) stops `import flashinfer`, and so the build."""
    build = _venv_with(tmp_path, "raise RuntimeError('CUDA driver API not found')")
    with pytest.raises(rb.BuildError) as err:
        build.check_flashinfer_import()
    assert str(err.value) == (
        "import flashinfer failed beside nvidia-cutlass-dsl 4.5.2: RuntimeError: CUDA driver API not found"
    )
    build2 = _venv_with(tmp_path / "b", None)
    build2.check_flashinfer_import()  # no cutlass at all: imports, as the real one does


# ---- downloads: streamed, bounded, checked on the file


class _Endless(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the handler's name
        self.send_response(200)
        self.end_headers()  # no length: the body never ends
        try:
            while True:
                self.wfile.write(b"x" * 65536)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


def test_an_endless_answer_is_cut_at_the_bound_and_nothing_is_left(tmp_path: Path) -> None:
    """The attack: a hostile mirror answers a header's URL with a body that never ends. It is cut at the bound,
    in one line, and neither the file nor its partial copy is left behind."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/prefill.cuh"
        dest = tmp_path / "prefill.cuh"
        with pytest.raises(rb.BuildError) as err:
            rb.download(url, dest, limit=1024 * 1024)
    finally:
        server.shutdown()
    assert "sent more than 1048576 bytes" in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_an_oversized_header_is_cut_before_its_hash_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.cuh"
    big.write_bytes(b"y" * (rb.SMALL_DOWNLOAD_MAX + 1))
    files = {PREFILL: {"url": big.as_uri(), "before": "0" * 64, "after": _sha(big.read_bytes())}}
    with pytest.raises(rb.BuildError, match="more than a patch or header can be"):
        rb.fetch_fixed(files, tmp_path / "scratch")
    assert not [p for p in (tmp_path / "scratch").rglob("*") if p.is_file()]


def test_a_header_with_the_wrong_hash_is_not_kept(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.cuh"
    wrong.write_bytes(b"not the fix\n")
    files = {PREFILL: {"url": wrong.as_uri(), "before": "0" * 64, "after": "1" * 64}}
    with pytest.raises(rb.BuildError, match="is not the known result"):
        rb.fetch_fixed(files, tmp_path / "scratch")
    assert not [p for p in (tmp_path / "scratch").rglob("*") if p.is_file()]


# ---- the FlashInfer shared-memory probe in the check step (vllm_rig/host/flashinfer_smem.py) ---------------


def _smem_build(tmp_path: Path, printed: str, kv: str = "fp8_e4m3", fix: str | None = None) -> rb.Build:
    """A runtime whose venv python sees a flashinfer 0.6.16.post3 and whose cuda_home's nvcc "compiles" the
    probe into a program printing `printed` (tests/unit/test_flashinfer_smem.py's stand-ins)."""
    from tests.unit import test_flashinfer_smem as t

    site = t._site(tmp_path / "site")
    spec = {"runtime": str(tmp_path / "rt"), "cache": str(tmp_path / "c"), "fingerprint": "f" * 64}
    nvcc = t._nvcc(tmp_path, printed)
    fixed = {"patch": fix, "files": {}} if fix else None
    build = rb.Build({**spec, "cuda_home": str(nvcc.parent.parent), "kv_cache_dtype": kv, "flashinfer_fix": fixed})
    build.python.parent.mkdir(parents=True)
    build.python.write_text(t._python(tmp_path, site).read_text())
    build.python.chmod(0o755)
    return build


def test_the_smem_probe_passes_and_is_recorded_for_runtime_json(tmp_path: Path, capsys) -> None:
    from tests.unit.test_flashinfer_smem import V0_6_16, _lines

    build = _smem_build(tmp_path, _lines(V0_6_16))
    build.check_flashinfer_smem()
    assert "check passed: FlashInfer 0.6.16.post3's head-dim-256 prefill tile for the FP8 KV cache is 65,536 B" in (
        capsys.readouterr().out
    )
    recorded = json.loads((build.work / build.SMEM_RECORD).read_text())
    assert recorded["fits"] is True and recorded["kv"] == "fp8" and recorded["sizeof_fp8_kv"] == 65_536


def test_the_smem_probe_refuses_an_overflowing_tile_in_one_line(tmp_path: Path) -> None:
    from tests.unit.test_flashinfer_smem import V0_6_14, _lines

    build = _smem_build(tmp_path, _lines(V0_6_14), kv="auto")
    with pytest.raises(rb.BuildError, match=r"65,616 B \(FP16 KV\).*with the FP16 KV cache served"):
        build.check_flashinfer_smem()
    assert not (build.work / build.SMEM_RECORD).exists()


def test_with_pr_3621_the_probe_takes_its_16_row_tile(tmp_path: Path) -> None:
    from tests.unit.test_flashinfer_smem import V0_6_14, _lines

    _smem_build(tmp_path / "a", _lines(V0_6_14), kv="auto", fix="pr3621").check_flashinfer_smem()
    with pytest.raises(rb.BuildError, match="invalid FP8 configuration"):
        _smem_build(tmp_path / "b", _lines(V0_6_14), kv="fp8", fix="pr3621").check_flashinfer_smem()
