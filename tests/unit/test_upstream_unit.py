"""The upstream runtime kind: the first seed's unit rendered literally, every flag and key the patched
release's real parser accepts, and a build plan that names the release, the patch and the CUDA lane.

The one remaining difference from the first seed's flags, on purpose: `--tool-call-parser qwen3_xml`
(qwen3_coder drops streamed tool calls with reasoning on: README "Judgment calls", the start check's
tool-call check). Paths differ (model, venv, FlashQLA, toolkit, working directory)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit import seed_units
from tests.unit.groupdata import profile_data
from tests.unit.test_unit_parity import _argv, _directives, _env, _pairs
from vllm_rig.known import fork_interface, server_interface, sm75_patch, upstream_releases
from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import plan
from vllm_rig.stages.service.unit import render_unit
from vllm_rig.validation import SettingsError, load_settings

PATHS = {"--model"}
# A release whose FlashInfer serves FP16 KV only (flashinfer_fix.fp8_kv_fits) renders the line with FP16 KV.
FP16_KV = {"0.26.0": {"kv_cache_dtype": "auto", "models": {}}}  # FP8-KV catalogue entries: not there


def _settings(**changes: Any) -> Settings:
    return load_settings({**profile_data(), "runtime_kind": "upstream", **changes})


def _unit(s: Settings) -> str:
    return render_unit(s, Layout.of(s))


def test_the_first_seeds_flags_render_literally_in_its_order() -> None:
    s = _settings(lan_serving="direct")  # the seed served the LAN itself, on 0.0.0.0
    rendered = _pairs(_argv(_unit(s)))
    expected = list(seed_units.SEED1_ARGS)  # qwen3_coder as written: 0.27.1 maps it to qwen3_xml's class
    assert [flag for flag, _ in rendered] == [flag for flag, _ in expected]
    for (flag, got), (_, want) in zip(rendered, expected, strict=True):
        if flag not in PATHS:
            assert got == want, flag  # JSON values too: byte for byte, "default_thinking_token_budget":4000 last


def test_the_environment_is_the_seeds_without_cuda_visible_devices_or_a_budget_variable() -> None:
    s = _settings()
    env = _env(s)
    for name, value in seed_units.SEED1_ENV.items():
        if name not in ("CUDA_HOME", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HF_ENDPOINT"):
            assert env[name] == value, name
    assert "CUDA_VISIBLE_DEVICES" not in env and fork_interface.THINKING_BUDGET_ENV not in env
    toolkit = f"{s.install_root}/current/venv/lib/python{s.python_version}/site-packages/nvidia/cu13"
    assert env["CUDA_HOME"] == toolkit and env["PATH"].startswith(f"{toolkit}/bin:")
    assert env["LD_LIBRARY_PATH"] == f"{toolkit}/lib64:{toolkit}/lib64/stubs"
    assert _directives(_unit(s))["WorkingDirectory"] == [f"{s.install_root}/current"]


def test_every_rendered_flag_and_reasoning_key_is_one_the_patched_release_accepts() -> None:
    s = _settings()
    argv = _argv(_unit(s))
    server = server_interface.upstream(s.vllm_version)
    assert server.unknown_flags([w for w in argv if w.startswith("--")]) == []
    config = json.loads(dict(_pairs(argv))["--reasoning-config"] or "{}")
    assert config["default_thinking_token_budget"] == 4000 and server.unknown_reasoning_keys(config) == []
    # The fork's parser would refuse both: the kinds are not interchangeable.
    assert server_interface.FORK.unknown_flags(["--device-ids"]) == ["--device-ids"]
    assert server_interface.FORK.unknown_reasoning_keys(config) == ["default_thinking_token_budget"]


@pytest.mark.parametrize("version", upstream_releases.supported_versions())
def test_every_supported_release_takes_the_default_profiles_whole_line(version: str) -> None:
    s = _settings(vllm_version=version, **FP16_KV.get(version, {}))
    argv = _argv(_unit(s))
    server = server_interface.upstream(version)
    assert server.flags_file.name == f"upstream-{version}-cli-flags.txt"
    assert server.unknown_flags([w for w in argv if w.startswith("--")]) == []
    assert "--device-ids" in argv and "default_thinking_token_budget" in dict(_pairs(argv))["--reasoning-config"]


def test_a_flag_only_the_older_release_has_is_refused_on_the_newer_one() -> None:
    """0.27.1's real parser dropped --max-num-partial-prefills (its dump against 0.26.0's): the check is per release."""
    flag = ["--max-num-partial-prefills=2"]
    assert _settings(vllm_version="0.26.0", **FP16_KV["0.26.0"], vllm_extra_args=flag).vllm_version == "0.26.0"
    with pytest.raises(SettingsError) as err:
        _settings(vllm_version="0.27.1", vllm_extra_args=flag)
    assert len(err.value.lines) == 1, err.value.lines
    line = err.value.lines[0]
    assert "--max-num-partial-prefills" in line and "vLLM 0.27.1 with the SM75 patch" in line


def test_a_flag_the_patched_release_lacks_is_refused_with_one_line_naming_it() -> None:
    upstream_flags = server_interface.upstream("0.27.1").flags()
    gone = {"--max-num-partial-prefills", "--max-long-partial-prefills"}  # 0.27.1 dropped them
    assert server_interface.FORK.flags() - upstream_flags == gone
    assert "--device-ids" in upstream_flags - server_interface.FORK.flags()
    with pytest.raises(SettingsError) as err:
        _settings(vllm_extra_args=["--enable-sm75-magic"])
    assert len(err.value.lines) == 1, err.value.lines
    assert "--enable-sm75-magic" in err.value.lines[0] and "vLLM 0.27.1 with the SM75 patch" in err.value.lines[0]


def test_the_fork_kind_keeps_its_own_spellings() -> None:
    assert load_settings(profile_data()).runtime_kind == "upstream"  # the default: the first box's own stack
    assert load_settings(profile_data("qwen38")).runtime_kind == "fork"  # the second box's engine
    s = load_settings({**profile_data(), "runtime_kind": "fork"})
    env, args = _env(s), dict(_pairs(_argv(_unit(s))))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env[fork_interface.THINKING_BUDGET_ENV] == "4000"
    assert "--device-ids" not in args and "default_thinking_token_budget" not in (args["--reasoning-config"] or "")


def test_the_plan_names_the_kind_the_release_the_patch_and_the_lane() -> None:
    s = _settings()
    inputs = plan.build_inputs(s)
    release = upstream_releases.release("0.27.1")
    assert inputs["kind"] == "upstream-wheel" and inputs["vllm"] == "0.27.1"
    assert inputs["vllm_wheel_sha256"] == release.sha256
    assert inputs["sm75_patch"] == sm75_patch.VLLM_PATCH.sha256
    assert inputs["flashqla_patch"] == sm75_patch.FLASHQLA_PATCH.sha256
    assert inputs["pins"]["torch"] == release.torch and inputs["pins"]["flashinfer-python"] == release.flashinfer
    assert inputs["torch_lane"] == "PyPI (CUDA toolkit 13.0.3)"
    assert inputs["flashinfer_fix"] is None  # 0.27.1 pins FlashInfer 0.6.16.post3: the merged fix is in it
    older = plan.build_inputs(_settings(vllm_version="0.26.0", **FP16_KV["0.26.0"]))
    assert older["flashinfer_fix"]["patch"] == "pr3621" and older["torch_lane"] == "PyPI (CUDA toolkit 13.0.2)"
    fork = load_settings({**profile_data(), "runtime_kind": "fork"})
    assert plan.fingerprint(inputs) != plan.fingerprint(plan.build_inputs(fork))  # a switch is a runtime change


def test_the_spec_downloads_known_bytes_and_checks_out_flashqla_only() -> None:
    s = _settings(git_mirror_prefix="https://mirror.example/")
    dirs = RuntimeDirs(s.install_root, "abc")
    assert [label for label, *_ in plan.git_sources(s, dirs)] == ["FlashQLA"]
    spec = plan.build_spec(s, dirs, "f" * 64, plan.build_inputs(s), 4)
    assert (
        spec["kind"] == "upstream-wheel" and spec["vllm_wheel"]["sha256"] == upstream_releases.release("0.27.1").sha256
    )
    patches = spec["sm75_patches"]
    assert patches["vllm"] == {
        "url": sm75_patch.VLLM_PATCH.url("https://mirror.example/"),
        "sha256": sm75_patch.VLLM_PATCH.sha256,
    }
    assert patches["vllm"]["url"].startswith("https://mirror.example/https://")
    assert spec["cuda_home"] == f"{dirs.dir}/venv/lib/python{s.python_version}/site-packages/nvidia/cu13"
    assert spec["torch_exact"] == {"torch": "2.13.0", "torchvision": "0.28.0", "torchaudio": "2.11.0"}


def test_the_releases_own_pins_are_required() -> None:
    with pytest.raises(SettingsError) as err:
        _settings(flashinfer_version="0.6.8.post1")
    assert any("flashinfer_version" in line and "0.6.16.post3" in line for line in err.value.lines), err.value.lines


def test_a_release_that_cannot_prefill_with_an_fp8_kv_cache_is_refused_in_one_line() -> None:
    """0.26.0 pins FlashInfer 0.6.14: with PR 3621 its FP8 head-size-256 tile is one the release refuses."""
    with pytest.raises(SettingsError) as err:
        _settings(vllm_version="0.26.0", models={})  # the default profile's FP8 KV cache
    assert len(err.value.lines) == 1, err.value.lines
    line = err.value.lines[0]
    assert "vllm_version='0.26.0'" in line and "FlashInfer 0.6.14" in line and "64 KiB" in line
    assert "use vllm_version 0.27.1" in line and "kv_cache_dtype auto" in line
    assert _settings(vllm_version="0.26.0", **FP16_KV["0.26.0"]).flashinfer_patch() == "pr3621"  # FP16 KV: kept


def test_the_fork_with_a_flashinfer_that_cannot_prefill_fp8_is_refused_and_serves_fp16() -> None:
    fork = {**profile_data(), "runtime_kind": "fork", "flashinfer_version": "0.6.14", "models": {}}
    with pytest.raises(SettingsError) as err:
        load_settings(fork)
    assert len(err.value.lines) == 1 and "flashinfer_version='0.6.14'" in err.value.lines[0], err.value.lines
    assert load_settings({**fork, "kv_cache_dtype": "auto"}).flashinfer_patch() == "pr3621"
    assert load_settings({**fork, "flashinfer_version": "0.6.15"}).flashinfer_patch() == "pr3526"  # = 0.6.16's headers


def test_null_pins_are_the_kinds_own() -> None:
    upstream = _settings()
    assert (upstream.torch_version, upstream.flashinfer_version) == ("2.13.0", "0.6.16.post3")
    assert upstream.tool_call_parser == "qwen3_coder"  # the first setup's spelling
    fork = load_settings({**profile_data(), "runtime_kind": "fork"})
    own = {key: getattr(fork, key) for key in fork_interface.OWN_SETTINGS}
    assert own == fork_interface.OWN_SETTINGS and fork.flashinfer_patch() is None
    assert load_settings(profile_data("qwen38")).flashinfer_version == "0.6.16"
    assert load_settings(profile_data("fork_validated")).flashinfer_version == "0.6.8.post1"


def test_the_v2_runner_is_refused_where_it_would_drop_the_servers_thinking_budget() -> None:
    """0.27.1 runs this model on the V1 runner; the patch's default budget is a V1-only hunk."""
    env = {**profile_data()["vllm_env"], "VLLM_USE_V2_MODEL_RUNNER": "1"}
    with pytest.raises(SettingsError) as err:
        _settings(vllm_env=env)
    assert len(err.value.lines) == 1 and "V1 model runner" in err.value.lines[0], err.value.lines
    assert _settings(vllm_env=env, default_thinking_token_budget=None).vllm_env == env
    assert _settings(vllm_env={**env, "VLLM_USE_V2_MODEL_RUNNER": "0"}).default_thinking_token_budget == 4000
