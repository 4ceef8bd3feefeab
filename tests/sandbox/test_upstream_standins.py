"""The upstream kind's stand-ins (tests/sandbox/fixtures/pkg_index/upstream.py): the default release's vLLM wheel, the
stand-in SM75 and FlashQLA patches, the CUDA 13.0 toolkit parts. Built in memory, installed into a scratch
directory as pip would, and run with this machine's Python; no sandbox machine is needed.

What they are checked against: the real release's facts in vllm_rig/known (its pins, the patch's files) and
what the real server printed (fixtures/forge/real_parser_outputs/upstream-<version>/).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.sandbox.fixtures.pkg_index import closure, upstream, wheelfile
from tests.unit.seed_units import SEED1_ARGS
from vllm_rig.host.runtime_build import BuildError
from vllm_rig.host.upstream_build import apply_patch
from vllm_rig.known import sm75_patch, upstream_releases

REAL = Path(__file__).resolve().parent / "fixtures" / "forge" / "real_parser_outputs" / f"upstream-{upstream.VERSION}"
SERVER = "vllm.entrypoints.openai.api_server"


@pytest.fixture(scope="module")
def wheel() -> wheelfile.Dist:
    return upstream.vllm_dist()


@pytest.fixture
def site(tmp_path: Path, wheel: wheelfile.Dist) -> Path:
    target = tmp_path / "site-packages"
    wheelfile.install(wheel, target)
    return target


def _patch(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.patch"
    path.write_bytes(upstream.sm75_patch() if name == "vllm" else upstream.flashqla_patch())
    return path


def _seed_argv() -> list[str]:
    argv: list[str] = []
    for flag, value in SEED1_ARGS:
        argv += [flag] if value is None else [flag, value]
    return argv


def _parse(site: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The stand-in's parser in its own process, as the server parses (prog api_server.py, COLUMNS=80)."""
    code = (
        "import json, sys\nfrom vllm.entrypoints.openai.cli_args import parse_args\n"
        "ns = parse_args(sys.argv[1:], prog='api_server.py')\n"
        "print(json.dumps({'device_ids': ns.device_ids, 'reasoning_config': ns.reasoning_config}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, cwd=site)


def _tail(text: str, lines: int = 4) -> list[str]:
    return text.rstrip("\n").splitlines()[-lines:]


# ---- the wheel's metadata


def test_wheel_requires_are_the_real_wheels_pins_less_the_unservable(wheel: wheelfile.Dist) -> None:
    requires, requires_python, _ = upstream.real_metadata()
    kept, dropped = upstream.served_requires()
    assert sorted(kept + list(dropped)) == sorted(requires)
    assert list(wheel.requires) == kept and wheel.requires_python == requires_python
    row = upstream_releases.release(upstream.VERSION)  # read from PyPI's wheel apart from this file
    pins = {Requirement(r).name: str(Requirement(r).specifier) for r in kept}
    assert pins["torch"] == f"=={row.torch}" and pins["flashinfer-python"] == f"=={row.flashinfer}"
    assert pins["torchvision"] == f"=={row.torchvision}" and pins["torchaudio"] == f"=={row.torchaudio}"
    tilelang = f"tilelang=={row.tilelang}"  # served where the lock has it (0.26.0's 0.1.9), else named as dropped
    assert pins.get("tilelang") == f"=={row.tilelang}" or tilelang in dropped
    assert requires_python == row.requires_python
    served = {(closure.normalize(n), v) for n, v in closure.load()}
    for line in dropped:  # each dropped one really has no served release that fits
        req = Requirement(line)
        assert not any(n == closure.normalize(req.name) and req.specifier.contains(v) for n, v in served), line


def test_the_wheel_carries_the_patched_releases_parser_and_a_built_extension(wheel: wheelfile.Dist) -> None:
    flags = upstream.FLAGS.read_text().splitlines()
    listed = {line.strip() for line in flags if line.strip() and not line.startswith("#")}
    dumped = {s for a in json.loads(upstream.PARSER.read_text())["actions"] for s in a["option_strings"]}
    assert dumped == listed - {"-O"}  # -O is the preprocessor's alias, not an argparse option
    assert "--device-ids" in dumped
    assert wheel.files["vllm/standin/real/cli-flags.txt"] == upstream.FLAGS.read_bytes()
    for module in ("_C_stable_libtorch", "_moe_C_stable_libtorch"):  # PyPI's wheel's, and no legacy _C
        assert wheel.files[f"vllm/{module}.abi3.so"][:4] == b"\x7fELF"
    assert "vllm/_C.abi3.so" not in wheel.files


def test_the_built_extension_imports(site: Path) -> None:
    code = "import vllm, vllm._C_stable_libtorch as C; print(vllm.__version__, C.silu_and_mul(2.0, 3.0))"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True
    )
    version, value = out.stdout.split()
    assert version == upstream.VERSION and abs(float(value) - 2.0 / (1 + 2.718281828459045**-2.0) * 3.0) < 1e-6


# ---- the SM75 patch


def test_the_patch_touches_the_real_patchs_nine_files() -> None:
    text = upstream.sm75_patch().decode()
    touched = [line.split(" b/")[-1] for line in text.splitlines() if line.startswith("diff --git ")]
    assert sorted(touched) == sorted(f.path for f in sm75_patch.VLLM_PATCH.files)


def test_the_patch_applies_to_the_wheels_files_once(site: Path, tmp_path: Path) -> None:
    patch = _patch(tmp_path, "vllm")
    assert apply_patch(site, patch, "the SM75 patch") == "applied"
    assert apply_patch(site, patch, "the SM75 patch") == "already applied"
    for rel, data in upstream.patched_files().items():
        assert (site / rel).read_bytes() == data


def test_a_patch_that_does_not_fit_names_the_file_and_changes_nothing(site: Path, tmp_path: Path) -> None:
    target = site / "vllm" / "v1" / "attention" / "backends" / "flashinfer.py"
    target.write_text(target.read_text().replace("DeviceCapability(8, 0)", "DeviceCapability(9, 0)"))
    before = (site / "vllm" / "envs.py").read_bytes()
    with pytest.raises(BuildError) as err:
        apply_patch(site, _patch(tmp_path, "vllm"), "the SM75 patch")
    assert "vllm/v1/attention/backends/flashinfer.py" in str(err.value) and "vllm/envs.py" not in str(err.value)
    assert (site / "vllm" / "envs.py").read_bytes() == before


def test_unpatched_the_first_seeds_line_is_refused_like_the_real_server(site: Path) -> None:
    result = _parse(site, _seed_argv())
    assert result.returncode == 2
    assert _tail(result.stderr) == _tail((REAL / "seed000_unpatched.stderr").read_text())


def test_patched_the_first_seeds_line_parses(site: Path, tmp_path: Path) -> None:
    apply_patch(site, _patch(tmp_path, "vllm"), "the SM75 patch")
    result = _parse(site, _seed_argv())
    assert result.returncode == 0, result.stderr
    parsed = json.loads(result.stdout)
    assert parsed["device_ids"] == [0, 1]
    assert parsed["reasoning_config"]["default_thinking_token_budget"] == 4000


def test_patched_an_unknown_key_is_still_refused_like_the_real_server(site: Path, tmp_path: Path) -> None:
    apply_patch(site, _patch(tmp_path, "vllm"), "the SM75 patch")
    result = _parse(site, ["--model", "m", "--reasoning-config", '{"reasoning_start_str":"<think>","bogus_key":1}'])
    assert result.returncode == 2
    assert _tail(result.stderr) == _tail((REAL / "rc_unknown_key.stderr").read_text())


def _upstream_says(site: Path, code: str, **env: str) -> str:
    full = {**os.environ, "PYTHONPATH": str(site), **env}
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_what_the_patch_changes_at_start(site: Path, tmp_path: Path) -> None:
    code = (
        "from vllm.standin import upstream as u\n"
        "from vllm.entrypoints.openai import protocol as p\n"
        "print(u.flashinfer_attention_allowed(), u.gdn_prefill_backend(None, {'gdn_prefill_backend': "
        "'flashqla_legacy'}), p.default_thinking_token_budget({'default_thinking_token_budget': 4000}))\n"
        "u.validate_environ()\n"
    )
    env = {"VLLM_SM75_SPEC_SYNC_MODE": "safe", "VLLM_DEFAULT_THINKING_TOKEN_BUDGET": "17"}
    before = _upstream_says(site, code, **env)
    assert before.splitlines()[0] == "False triton None"  # FlashInfer off SM75, so is its GDN prefill; no env budget
    assert "Unknown vLLM environment variable detected: VLLM_SM75_SPEC_SYNC_MODE" in before
    apply_patch(site, _patch(tmp_path, "vllm"), "the SM75 patch")
    after = _upstream_says(site, code, **env)
    assert after.splitlines()[0] == "True flashqla_legacy 4000"
    assert "VLLM_SM75_SPEC_SYNC_MODE" not in after


# ---- the FlashQLA patch and the CUDA 13.0 parts


def test_the_flashqla_patch_applies_to_the_stand_in_flashqla_once(tmp_path: Path) -> None:
    tree = tmp_path / "flashqla"
    for rel, data in upstream.tree(upstream.FLASHQLA_TREE).items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    patch = _patch(tmp_path, "flashqla")
    assert apply_patch(tree, patch, "the FlashQLA patch") == "applied"
    assert apply_patch(tree, patch, "the FlashQLA patch") == "already applied"
    legacy = (tree / "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py").read_text()
    assert 'or "7.5"' in legacy and '"7.0;7.5"' not in legacy


def test_the_cuda_parts_install_nvcc_13_0_and_libcudart_13(tmp_path: Path) -> None:
    for dist in upstream.cuda_dists():
        wheelfile.install(dist, tmp_path)
    home = tmp_path / upstream.CU13
    out = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=True)
    assert "Cuda compilation tools, release 13.0, V13.0.88" in out.stdout
    version = ctypes.c_int()
    assert ctypes.CDLL(str(home / "lib" / "libcudart.so.13")).cudaRuntimeGetVersion(ctypes.byref(version)) == 0
    assert version.value == 13000


def test_cuda_toolkit_extras_name_the_served_parts() -> None:
    """cuda-toolkit 13.0.2's real metadata asks for exactly the versions the stand-in parts have."""
    meta = closure.metadata("cuda-toolkit", "13.0.2")
    versions = {d.name: d.version for d in upstream.cuda_dists()}
    for extra in ("nvcc", "crt", "cccl", "cudart", "nvvm"):
        wanted = [Requirement(r) for r in meta.requires_dist if f"extra == '{extra}'" in r]
        assert len(wanted) == 1
        assert wanted[0].specifier.contains(versions[wanted[0].name]), (extra, wanted[0])


def test_the_served_metadata_is_what_the_wheel_declares(wheel: wheelfile.Dist) -> None:
    entries = wheelfile.contents(wheel)
    meta = Parser().parsestr(entries[f"vllm-{upstream.VERSION}.dist-info/METADATA"].decode())
    assert meta.get_all("Requires-Dist") == list(wheel.requires)
