"""Every settings rule: a value it refuses (one clear line naming the key) and a value it accepts."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.known.git_tags import SHA40
from vllm_rig.settings import Settings, plain_http_warnings
from vllm_rig.validation import SettingsError, load_settings

_PREFILL = "include/flashinfer/attention/prefill.cuh"
_FIXED = {
    "url": f"https://raw.example/flashinfer-ai/flashinfer/{'c' * 40}/{_PREFILL}",
    "before": "a" * 64,
    "after": "b" * 64,
}
_PR3621 = {"patch": "pr3621", "files": {_PREFILL: _FIXED}}
_PR3526 = {**_PR3621, "patch": "pr3526"}
_NO_FIX = {"flashinfer_version": "0.6.16"}
_FI14 = {"flashinfer_version": "0.6.14", "kv_cache_dtype": "auto"}  # PR 3621's release (FP16 KV only)

_FC = {"repo": "https://github.com/vllm-project/FlashMLA.git", "ref": "a" * 40, "env": "FLASH_MLA_SRC_DIR"}

_ENTRY = {"repo": "Qwen/Qwen3.8-27B-FP8", "dir": "/opt/vllm-rig/models/small", "served_name": "small"}

# (key, refused value, accepted value, other settings needed to isolate the rule)
RULES: list[tuple[str, Any, Any, dict[str, Any]]] = [
    ("ssh_tcp_nodelay", "off", False, {}),
    ("gpu_count", 0, 4, {}),
    ("gpu_min_memory_mib", 10, 11000, {}),
    ("gpu_compute_capability", "6.1", "7.0", {}),
    ("min_free_disk_gb", 0, 50, {}),
    ("min_free_disk_gb", "lots", None, {}),
    ("min_ram_gb", -1, 32, {}),
    ("preflight_report", "yaml", "json", {}),
    ("nvidia_repo_url", "ftp://mirror/cuda", "https://127.0.0.1:18081/nvidia/{distro}/", {}),
    ("nvidia_repo_key_fingerprint", "3bf863cc", "EB693B3035CD5710E231E123A4B469963BF863CC", {}),
    ("nvidia_driver_version", "580", "580.159.04", {}),
    ("nvidia_driver_version", "570.86.10", "575.57.08", {}),  # too old for CUDA 12.9
    ("nvidia_driver_flavor", "nouveau", "open", {}),
    ("nvidia_driver_replace_existing", "maybe", True, {}),
    ("secure_boot_mok_enrollment", "auto", "deploy_stages", {"secure_boot_mok_password": "one-time"}),
    ("secure_boot_mok_password", "two\nlines", "one-time", {}),
    ("secure_boot_mok_password", None, "x" * 256, {"secure_boot_mok_enrollment": "deploy_stages"}),
    ("nvidia_keep_archive_driver", "maybe", True, {}),
    ("nvidia_keep_archive_driver", True, False, {"nvidia_driver_replace_existing": True}),
    ("gpu_power_limit_w", 500, 250, {}),
    ("gpu_power_limit_w", 50, None, {}),
    ("gpu_power_limit_min_w", 400, 120, {}),
    ("reboot_timeout_s", 5, 900, {}),
    ("driver_reboot", "later", "ask", {}),
    ("cuda_version", "13.0", "12.8", {}),
    ("cuda_version", "12", "12.9", {}),
    ("install_root", "opt/vllm", "/srv/vllm-rig", {}),
    ("python_version", "2.7", "3.11", {}),
    ("torch_version", "two", "2.11.0", {}),
    ("triton_version", "3.x", "3.6.0", {}),
    ("transformers_version", "", "5.12.1", {}),
    ("numpy_version", "latest", "2.3.5", {}),
    ("flashinfer_version", "0.6.12", "0.6.8.post1", {}),  # 0.6.10-0.6.13: no fix applies
    ("flashinfer_version", "0.6.13", "0.6.15", {}),  # auto picks PR 3526 for 0.6.15
    ("flashinfer_version", "0.6.17", "0.6.16", {}),  # no fix needed, but no resolved requirement set for it
    ("flashinfer_requirement_overrides", {"0.6.14": {"nvidia-cutlass-dsl": "4.5.2"}}, {"0.6.14": {}}, _FI14),
    ("flashinfer_requirement_overrides", {"0.6.14": {"not a name": "==1"}}, {"0.6.14": {"a-b": ">=1,<2"}}, _FI14),
    ("flashinfer_requirement_overrides", {"latest": {}}, {"0.6.14": {}}, _FI14),
    ("torchvision_version", "latest", "0.26.0", {}),
    ("torchaudio_version", "two", "2.11.0", {}),
    ("flashinfer_sm75_fix", "pr3621", "upstream", {"flashinfer_version": "0.6.15"}),  # PR 3621 is 0.6.14 only
    ("flashinfer_sm75_fix", "upstream", "pr3621", _FI14),  # PR 3526 does not apply to 0.6.14
    ("flashinfer_sm75_fix", "none", "auto", _FI14),  # 0.6.14 fails on SM75 without its fix
    ("flashinfer_sm75_fix", "patch", "pr3621", _FI14),
    ("fork_repo", "github.com/weicj/x", "https://github.com/weicj/vLLM-2080Ti-Definitive.git", {}),
    ("fork_ref", "v0.1.17", "0123456789abcdef0123456789abcdef01234567", {}),
    ("flashqla_ref", "main", "3ab27d77d8ca01d7a4718903b726add1a8886c0e", {}),
    ("cutlass_repo", "git@github.com:NVIDIA/cutlass", "https://github.com/NVIDIA/cutlass.git", {}),
    ("cutlass_ref", "main", "da5e086dab31d63815acafdac9a9c5893b1c69e2", {}),  # a branch moves
    ("cutlass_ref", "v4.4.2", "da5e086dab31d63815acafdac9a9c5893b1c69e2", {}),  # and so can a tag
    ("triton_src_repo", "triton-lang/triton", "https://github.com/triton-lang/triton.git", {}),
    ("triton_src_ref", "release/3.6.x", "0123456789abcdef0123456789abcdef01234567", {}),
    ("flashinfer_sm75_patches", {"0.6.14": {"patch": "pr3621"}}, {"0.6.14": _PR3621}, _FI14),  # no files
    ("flashinfer_sm75_patches", {"0.6.14": {**_PR3621, "url": _FIXED["url"]}}, {"0.6.14": _PR3621}, _FI14),  # old form
    ("flashinfer_sm75_patches", {"0.6.14": {**_PR3621, "files": {_PREFILL: {**_FIXED, "url": None}}}}, {}, _NO_FIX),
    (  # a diff is not the fixed file
        "flashinfer_sm75_patches",
        {"0.6.14": {**_PR3621, "files": {_PREFILL: {**_FIXED, "url": "https://github.com/o/r/pull/3621.diff"}}}},
        {},
        _NO_FIX,
    ),
    (
        "flashinfer_sm75_patches",
        {"0.6.14": {**_PR3621, "files": {_PREFILL: {**_FIXED, "after": "B" * 64}}}},
        {},
        _NO_FIX,
    ),
    ("flashinfer_sm75_patches", {"0.6.14": {**_PR3621, "patch": "pr3526"}}, {"0.6.14": _PR3621}, _FI14),  # wrong fix
    ("flashinfer_sm75_patches", {"0.6.15": _PR3526}, {"0.6.14": _PR3621}, _FI14),  # nothing for the chosen 0.6.14
    ("flashinfer_sm75_patches", {"0.6.14": {**_PR3621, "files": {"/etc/x": _FIXED}}}, {}, _NO_FIX),
    ("fetchcontent_sources", {"x": {**_FC, "ref": "main"}}, {"x": _FC}, {}),  # a branch moves
    ("fetchcontent_sources", {"x": {**_FC, "env": "flash mla"}}, {"x": {**_FC, "min_arch": "9.0"}}, {}),
    ("fetchcontent_sources", {"x": {"repo": _FC["repo"]}}, {}, {}),  # no ref, no variable
    ("fetchcontent_sources", {"x": {**_FC, "min_arch": "sm90"}}, {"x": {**_FC, "min_arch": None}}, {}),
    ("git_mirror_prefix", "https://ghproxy.example", "https://ghproxy.example/", {}),
    ("pip_index_url", "not a url", None, {}),
    ("hf_verify_endpoint", "second.example", "https://second.example", {}),
    ("torch_index_url", "download.pytorch.org/whl/cu128", "https://download.pytorch.org/whl/cu128", {}),
    ("build_max_jobs", 0, "auto", {}),
    ("build_max_jobs", "many", 6, {}),
    ("build_timeout_s", 10, 3600, {}),
    ("force_rebuild", "yes please", False, {}),
    ("runtime_artifacts", "maybe", True, {}),
    ("runtime_artifact_store", "https://store.example/artifacts", "/srv/vllm-rig/artifacts", {}),  # no "/"
    ("runtime_artifact_store", "ftp://store.example/artifacts/", "https://store.example/artifacts/", {}),
    (
        "runtime_artifact_store",
        "https:///artifacts/",
        "http://10.0.0.5:8080/vllm-rig/",
        {"runtime_artifact_store_allow_http": True},
    ),
    ("runtime_artifact_store", "http://10.0.0.5:8080/vllm-rig/", "https://10.0.0.5:8443/vllm-rig/", {}),
    ("runtime_artifact_key", "", "~/.config/vllm-rig/runtime-artifact.key", {}),
    ("runtime_artifact_store_allow_http", "yes please", True, {}),
    ("locks_dir", "", "locks", {}),
    ("locks_dir", "https://locks.example/", "/srv/vllm-rig/locks", {}),
    ("locks_dir", "README.md", "locks", {}),  # a file of the project, not a directory
    ("allow_plain_http_mirrors", "yes please", True, {}),
    ("runtime_artifact_store", "https://store.example/a/?x=1", "runtime-artifacts", {}),
    ("runtime_artifact_store_auth", "no-colon", "rig:s3cret:with:colons", {}),
    ("runtime_artifact_store_ca", "", "/etc/ssl/local-ca.pem", {}),
    ("runtime_artifacts_keep", 0, 5, {}),
    ("hf_endpoint", "hf-mirror.com", "https://huggingface.co", {}),
    ("hf_token", "hf_abc def\nHF_HUB_OFFLINE=1", "hf_0123456789abcdefABCDEF", {}),
    ("hf_disable_xet", "sometimes", False, {}),
    ("model_repo", "Qwen3.8-27B-FP8", "Qwen/Qwen3.8-27B-FP8", {}),
    ("model_revision", "../main", "0123456789abcdef0123456789abcdef01234567", {}),
    ("model_dir", "models/qwen", "/data/models/qwen", {}),
    ("download_timeout_s", 1, 600, {}),
    ("model_peers", "yes", False, {}),
    ("model_peer_address", "rig 1", "192.168.1.20", {}),
    ("model_peer_port", 0, 28480, {}),
    ("model_peer_wait_s", 5, 600, {}),
    ("service_name", "vLLM Server", "vllm-qwen", {}),
    ("service_user", "Root", "llm", {}),
    ("service_start_timeout_s", 30, 1800, {}),
    ("service_restart_sec", -1, 5, {}),
    ("start_check_attempts", 0, 5, {}),
    ("start_check_needle_words", 10, 2000, {}),
    ("start_check_kv_shrink_share", 1.5, 0.3, {}),
    ("gpu_wait_timeout_s", 900, 300, {}),  # 900 leaves nothing of the 900 s start timeout
    ("gpu_wait_max_used_mib", -1, 512, {}),
    ("gpu_wait_graphics_max_mib", -1, 128, {}),
    ("watchdog_enabled", "sometimes", False, {}),
    ("watchdog_interval_s", 5, 600, {}),
    ("watchdog_failures", 0, 5, {}),
    ("watchdog_max_restarts", -1, 0, {}),
    ("watchdog_timeout_s", 1, 60, {}),
    ("vllm_log_file", "vllm.log", "/var/log/vllm.log", {}),
    ("served_model_name", "qwen local", "qwen-local", {}),
    ("vllm_host", "everywhere", "127.0.0.1", {}),
    ("vllm_port", 70000, 8001, {}),
    ("vllm_api_key", "hunter2", "none", {"lan_serving": "direct"}),
    ("vllm_api_key", "none", "auto", {}),  # the proxy checks the key on every path
    ("vllm_host", "0.0.0.0", "::1", {}),  # behind the proxy the server stays on loopback
    ("vllm_host", "my-box", "192.168.1.5", {"lan_serving": "direct"}),
    ("lan_serving", "nginx", "direct", {}),
    ("lan_port", 8000, 9443, {}),  # vllm_port's
    ("lan_port", 0, 443, {}),
    ("lan_allow", ["192.168.1.5/24"], ["192.168.1.0/24", "fd00::/8"], {}),
    ("lan_allow", ["my-lan"], [], {}),
    ("lan_metrics_allow", ["10.0.0.300/32"], ["10.0.0.7/32"], {}),
    ("lan_health_open", "yes", True, {}),
    ("chat_page", "yes", True, {}),
    ("chat_page", True, False, {"lan_serving": "direct", "vllm_api_key": "auto"}),  # nginx serves the page
    ("python_version", "3.13", "3.12", {"chat_page": True}),  # Open WebUI: >=3.11,<3.13
    ("python_version", "3.10", "3.11", {"chat_page": True}),
    ("chat_page_port", 8443, 8445, {"chat_page": True}),  # lan_port's
    ("chat_page_port", 8444, 8446, {"chat_page": True, "front_of": ["box2"]}),  # front_port's, with a front
    ("chat_page_port", 8000, 9444, {"chat_page": True}),  # vllm_port's
    ("chat_page_backend_port", 8445, 3080, {"chat_page": True}),  # chat_page_port's
    ("chat_page_backups_keep", 0, 14, {}),
    ("chat_page_torch_index_url", "not a url", None, {}),
    (
        "chat_page_torch_index_url",
        None,
        "https://mirror.example/whl/cpu/",
        {"chat_page": True, "torch_index_url": "https://mirror.example/torch/"},
    ),
    ("chat_page_index_url", "ftp://x", None, {}),
    ("remove_chat_data", "yes", True, {}),
    ("lan_tls", "self_signed", "local_ca", {}),
    ("lan_tls_cert_file", "/etc/ssl/box.pem", None, {}),  # set, but lan_tls is local_ca
    ("lan_tls_key_file", "/etc/ssl/box.key", None, {}),
    ("lan_tls_names", ["bad name"], ["box.lan", "192.168.1.5"], {}),
    ("api_keys", ["Laptop"], ["laptop", "agent", "chat-page"], {}),
    ("api_keys", ["laptop", "agent", "laptop"], ["laptop", "agent"], {}),
    ("api_keys", ["server"], ["server-room"], {}),
    ("api_keys", ["a" * 33], ["a" * 32], {}),
    ("api_keys", ["lap top"], ["laptop"], {}),
    ("api_keys", ["laptop"], [], {"lan_serving": "direct"}),
    ("lan_max_body_mb", 0, 256, {}),
    ("lan_read_timeout_s", 5, 3600, {}),
    ("front_of", ["box two"], ["box2"], {}),
    ("front_port", 8443, 9444, {"front_of": ["box2"]}),
    ("tensor_parallel_size", 3, 1, {"device_ids": None}),
    ("tensor_parallel_size", 4, 2, {"device_ids": None}),  # more than gpu_count=2
    ("device_ids", [0, 0], [1, 0], {}),
    ("device_ids", [0, 2], None, {}),  # index 2 on a 2-GPU box
    ("dtype", "fp32", "float16", {}),
    ("quantization", "awq", None, {}),
    ("kv_cache_dtype", "int8", "auto", {}),
    ("kv_cache_dtype", "fp4", "fp8", {}),
    ("max_model_len", 300000, 131072, {}),
    ("max_model_len", 100, 262144, {}),
    ("mamba_cache_mode", "sometimes", "align", {}),
    ("max_num_seqs", 0, 1, {}),
    ("max_num_batched_tokens", 4096, 100000, {"enable_chunked_prefill": False}),
    ("enable_chunked_prefill", "on", True, {}),
    ("async_scheduling", "later", None, {}),
    ("reasoning_config", "budget=4000", {"reasoning_start_str": "<think>"}, {}),
    ("reasoning_config", {"default_thinking_token_budget": 4000}, {"reasoning_end_str": "</think>"}, {}),  # exit 2
    ("reasoning_config", {"thinking_token_budget": 4000}, None, {}),  # a per-request field, not a key
    ("default_thinking_token_budget", 0, 4000, {}),  # would end every thinking before it starts
    ("default_thinking_token_budget", "4000", 2000, {}),  # strict: a string is a typo here
    ("default_thinking_token_budget", True, None, {}),
    ("vllm_env", {"VLLM_DEFAULT_THINKING_TOKEN_BUDGET": "4000"}, {}, {}),  # the setting's own variable
    ("vllm_extra_args", ["--device-ids=0,1"], ["--enforce-eager"], {}),  # not a flag of the fork's line
    ("vllm_extra_args", ["--enable-reasoning"], ["--max-logprobs=5"], {}),  # removed before vLLM 0.21
    ("chat_template_content_format", "markdown", "openai", {}),
    ("gpu_memory_utilization", 1.2, 0.9, {}),
    ("gpu_memory_utilization", 0, 0.5, {}),
    ("additional_config", ["flashqla"], {"gdn_prefill_backend": "flashqla_legacy"}, {}),
    ("num_speculative_tokens", 0, 3, {}),  # no MTP: garbage output on this stack
    ("cudagraph_capture_sizes", [4], [3], {"num_speculative_tokens": 2}),  # 1 x (1 + 2) = 3
    ("cudagraph_mode", "FULL", "PIECEWISE", {}),
    ("cudagraph_mode", "NONE", "PIECEWISE", {}),
    ("cudagraph_capture_sizes", [8], [1, 2, 4], {}),
    ("cudagraph_capture_sizes", [], [4], {}),
    ("cudagraph_capture_sizes", [4], [4, 8], {"max_num_seqs": 2}),  # 2 x (1 + 3) = 8
    ("generation_config", "model", "vllm", {}),
    ("override_generation_config", "temperature=0.1", {"temperature": 0.1}, {}),
    # vLLM drops presence_penalty from --override-generation-config (settings._generation_override says where)
    ("override_generation_config", {"presence_penalty": 0.5}, {"presence_penalty": 0.0, "temperature": 0.6}, {}),
    ("cpu_offload_gb", -2, 4, {}),
    ("omp_num_threads", 0, 4, {}),
    ("vllm_env", {"BAD NAME": "1"}, {"VLLM_LOGGING_LEVEL": "DEBUG"}, {}),
    ("vllm_env", {"VLLM_API_KEY": "x"}, {}, {}),
    ("vllm_extra_args", ["enforce-eager"], ["--enforce-eager"], {}),
    ("verify_gate", "ignore", "warn", {}),
    ("verify_bandwidth", "sometimes", False, {}),
    ("verify_min_p2p_gbps", -1.0, 40.0, {}),
    ("verify_min_allreduce_gbps", -5.0, 0.0, {}),
    ("bench_sizes", "20K x3", "2000:1:64", {}),
    ("bench_label", "FP8 KV cache", "FP8-KV", {}),
    ("status_format", "yaml", "json", {}),
    ("triage_journal_lines", 5, 1000, {}),
    ("logs_source", "kernel", "build", {}),
    ("keys_action", "rotate", "list", {}),
    ("keys_name", None, "laptop", {"keys_action": "add"}),
    ("keys_action", "add", "list", {"lan_serving": "direct", "keys_name": "laptop"}),
    ("keys_name", "../etc/passwd", "chat-page", {}),
    ("logs_lines", 0, 500, {}),
    ("logs_follow", "yes", True, {}),
    ("remove_model", 1, True, {}),
    ("remove_driver", "true", True, {}),
    ("vllm_extra_args", ["--max-model-len=5000"], ["--seed=1"], {}),  # repeats a rendered flag
    ("model", "qwen39", "qwen38", {}),  # not in the catalogue
    ("models", {"small": {"repo": "a/b"}}, {"small": _ENTRY}, {}),  # no dir, no served name
    ("models", {"default": _ENTRY}, {"small": _ENTRY}, {}),  # "default" is the single-model settings' name
    ("models", {"small": {**_ENTRY, "flags": {"vllm_port": 9000}}}, {"small": {**_ENTRY, "flags": {}}}, {}),
    ("models", {"small": {**_ENTRY, "size": 4}}, {"small": {**_ENTRY, "revision": "v2"}}, {}),
    ("models_keep", -1, 0, {}),
    ("fork_release_line", "0.1.x", "v0.2", {}),
    ("runtime_kind", "pip", "upstream", {}),
    ("upstream_build", "source", "wheel", {}),
    ("vllm_version", "0.25.0", "0.26.0", {}),  # in the table, but its FlashInfer pin has no public SM75 fix
    ("vllm_version", "0.23.0", "0.26.0", {}),  # not in the table
    ("vllm_wheel_sha256", "abc", "0" * 64, {}),
    ("vllm_sdist_sha256", "ABC", "0" * 64, {}),
    (
        "upstream_compile_sources",
        {"cutlass": {"repo": "https://x.example/c.git", "ref": "4" * 40, "env": "VLLM_CUTLASS_SRC_DIR"}},
        {
            "cutlass": {"repo": "https://x.example/c.git", "ref": "4" * 40, "env": "VLLM_CUTLASS_SRC_DIR"},
            "triton_kernels": {"repo": "https://x.example/t.git", "ref": "3" * 40, "env": "TRITON_KERNELS_SRC_DIR"},
        },
        {},
    ),
    ("upstream_compile_sources", {"cutlass": {}, "triton_kernels": {"repo": "x"}}, None, {}),
    (  # a tag in a source: refused, whatever the repository
        "upstream_compile_sources",
        {
            "cutlass": {"repo": "https://x.example/c.git", "ref": "4" * 40, "env": "VLLM_CUTLASS_SRC_DIR"},
            "triton_kernels": {"repo": "https://x.example/t.git", "ref": "v3.5.1", "env": "TRITON_KERNELS_SRC_DIR"},
        },
        None,
        {},
    ),
    ("sm75_patch_files", {"vllm": {"url": "https://x.example/p", "sha256": "0" * 64}}, None, {}),
    (
        "sm75_patch_files",
        {"vllm": {"url": "ftp://x/p", "sha256": "0" * 64}, "flashqla": {"url": "https://x/q", "sha256": "1" * 64}},
        {"vllm": {"url": "https://x/p", "sha256": "0" * 64}, "flashqla": {"url": "https://x/q", "sha256": "1" * 64}},
        {},
    ),
    ("torch_version", "2.10.0", "2.13.0", {"runtime_kind": "upstream"}),  # vLLM 0.27.1's wheel pins 2.13.0
    ("vllm_version", "0.26.0", "0.27.1", {"runtime_kind": "upstream"}),  # 0.26.0's FlashInfer: no FP8 KV on SM75
    ("flashinfer_version", "0.6.14", "0.6.15", {"kv_cache_dtype": "fp8_e4m3"}),  # PR 3621: no FP8 KV
    ("vllm_extra_args", ["--device-ids=0,1"], ["--seed=1"], {}),  # the fork's line has no --device-ids
    ("reasoning_config", {"default_thinking_token_budget": 10}, {}, {"runtime_kind": "upstream"}),
    ("fork_update_margin_pct", 80.0, 0.0, {}),
]


def _with(**changes: Any) -> dict[str, Any]:
    # The rules are read on the fork kind, where FlashInfer and torch are free to choose; the upstream kind
    # takes the release's own pins (its rules carry runtime_kind in their context).
    data = {**profile_data(), "runtime_kind": "fork"}
    if not {"model", "models"} & set(changes):
        data["models"] = {}  # each rule alone: the catalogue's entries would inherit the value under test
    data.update(changes)
    return data


@pytest.mark.parametrize("profile", [None, "qwen38", "fork_validated"])
def test_profiles_are_valid(profile: str | None) -> None:
    assert isinstance(load_settings(profile_data(profile)), Settings)


@pytest.mark.parametrize(("key", "bad", "good", "context"), RULES, ids=[f"{r[0]}={r[1]!r}" for r in RULES])
def test_rule_refuses_bad_value_with_one_line(key: str, bad: Any, good: Any, context: dict[str, Any]) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(**context, **{key: bad}))
    assert len(err.value.lines) == 1, err.value.lines
    line = err.value.lines[0]
    assert line.startswith(f"settings: {key}="), line
    assert "not allowed: " in line and len(line.split("not allowed: ", 1)[1]) > 10


@pytest.mark.parametrize(("key", "bad", "good", "context"), RULES, ids=[f"{r[0]}={r[1]!r}" for r in RULES])
def test_rule_accepts_good_value(key: str, bad: Any, good: Any, context: dict[str, Any]) -> None:
    settings = load_settings(_with(**context, **{key: good}))
    assert getattr(settings, key) == good


def test_every_setting_is_covered_by_a_rule_or_is_free_text() -> None:
    free_text = {
        "reasoning_parser",
        "tool_call_parser",
        "default_chat_template_kwargs",
        "flashqla_repo",
        "enable_prefix_caching",
        "skip_mm_profiling",
        "enable_auto_tool_choice",
        "disable_uvicorn_access_log",
        "gpu_power_limit_max_w",
    }
    covered = {rule[0] for rule in RULES}
    assert set(Settings.model_fields) - covered - free_text == set()


def test_missing_setting_names_the_file_to_fix() -> None:
    data = profile_data()
    del data["vllm_port"]
    with pytest.raises(SettingsError) as err:
        load_settings(data)
    assert err.value.lines == [
        "settings: vllm_port is missing; add it to group_data/all.py (an integer from 1 to 65535)"
    ]


def test_typo_in_a_key_is_caught_with_a_suggestion() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(max_model_length=5000))
    assert err.value.lines == [
        "settings: max_model_length is not a setting (did you mean max_model_len?); "
        "the settings are listed in group_data/all.py"
    ]


def test_connection_and_pyinfra_keys_are_not_settings_typos() -> None:
    load_settings(_with(ssh_hostname="10.0.0.2", ssh_port=22, _sudo=True, profile="qwen38"))


def test_secret_value_is_never_echoed() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(hf_token=12345))
    assert "12345" not in str(err.value) and "hf_token=<hidden>" in str(err.value)


def test_store_url_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(runtime_artifact_store="https://rig:s3cret@store.example/artifacts/"))
    assert err.value.lines == [
        "settings: runtime_artifact_store='https://<hidden>@store.example/artifacts/' is not allowed: "
        "must not hold credentials: put user:password in runtime_artifact_store_auth"
    ]


def test_a_plain_http_store_is_one_line_that_names_the_setting_to_allow_it() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(runtime_artifact_store="http://10.0.0.5:8080/vllm-rig/"))
    assert len(err.value.lines) == 1
    assert "https://" in err.value.lines[0] and "runtime_artifact_store_allow_http: true" in err.value.lines[0]
    load_settings(_with(runtime_artifact_store="http://10.0.0.5:8080/vllm-rig/", runtime_artifacts=False))


def test_an_api_key_in_the_extra_args_is_refused_without_echoing_it() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(vllm_extra_args=["--enforce-eager", "--api-key=hand-set-s3cret"]))
    assert len(err.value.lines) == 1 and "hand-set-s3cret" not in err.value.lines[0]
    assert "--api-key=<hidden>" in err.value.lines[0] and 'use vllm_api_key: "auto"' in err.value.lines[0]
    with pytest.raises(SettingsError) as err:
        load_settings(_with(vllm_extra_args=["--api-key"]))
    assert "vllm_api_key" in err.value.lines[0]


@pytest.mark.parametrize(
    ("key", "url", "hint"),
    [
        ("hf_endpoint", "https://me:hf_s3cret@hf-mirror.example", "hf_token"),
        ("pip_index_url", "https://me:s3cret@pypi.example/simple", "without credentials"),
        ("torch_index_url", "https://tok3n-s3cret@download.example/whl/cu128", "without credentials"),
        ("fork_repo", "https://me:s3cret@github.com/weicj/vLLM-2080Ti-Definitive.git", "without credentials"),
        ("git_mirror_prefix", "https://me:s3cret@mirror.example/", "without credentials"),
        ("fetchcontent_sources", {"x": {**_FC, "repo": "https://me:s3cret@github.com/o/r.git"}}, "without credentials"),
    ],
)
def test_credentials_in_a_url_setting_are_refused_without_echoing_them(key: str, url: Any, hint: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(**{key: url}))
    assert len(err.value.lines) == 1 and "s3cret" not in err.value.lines[0], err.value.lines
    assert err.value.lines[0].startswith(f"settings: {key}=") and "must not hold credentials" in err.value.lines[0]
    assert hint in err.value.lines[0]


def test_a_secret_looking_vllm_env_name_is_refused_without_echoing_its_value() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(vllm_env={"WANDB_API_KEY": "wandb-s3cret-value"}))
    assert len(err.value.lines) == 1 and "wandb-s3cret-value" not in err.value.lines[0], err.value.lines
    assert "WANDB_API_KEY looks like a secret" in err.value.lines[0] and "EnvironmentFile=" in err.value.lines[0]


def test_store_password_is_never_echoed() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(runtime_artifact_store_auth="s3cret-without-user"))
    assert "s3cret" not in str(err.value) and "runtime_artifact_store_auth=<hidden>" in str(err.value)


def test_several_problems_give_one_line_each() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(_with(vllm_port=0, kv_cache_dtype="int8", cudagraph_mode="FULL"))
    keys = sorted(line.split("=", 1)[0] for line in err.value.lines)
    assert keys == ["settings: cudagraph_mode", "settings: kv_cache_dtype", "settings: vllm_port"]


def test_the_chosen_catalogue_entry_becomes_the_model_and_its_flags() -> None:
    entry = {**_ENTRY, "revision": "v2", "flags": {"max_model_len": 65536, "tool_call_parser": "qwen3_xml"}}
    s = load_settings(_with(model="small", models={"small": entry}))
    assert (s.model_repo, s.model_revision, s.model_dir, s.served_model_name) == (
        "Qwen/Qwen3.8-27B-FP8",
        "v2",
        "/opt/vllm-rig/models/small",
        "small",
    )
    assert (s.max_model_len, s.tool_call_parser) == (65536, "qwen3_xml")
    default = load_settings(_with(models={"small": entry}))  # "default": the single-model settings as they are
    plain = profile_data()
    assert (default.model_repo, default.max_model_len) == (plain["model_repo"], plain["max_model_len"])


def test_a_bad_flag_in_the_chosen_entry_is_named_with_its_entry() -> None:
    bad = {**_ENTRY, "flags": {"max_model_len": 300000}}
    with pytest.raises(SettingsError) as err:
        load_settings(_with(model="small", models={"small": bad}))
    assert err.value.lines == [
        "settings: max_model_len=300000 is not allowed: must be an integer from 1024 to 262144 "
        "(the model's max_position_embeddings) (from models['small'])"
    ]


def test_an_entry_not_chosen_is_checked_too() -> None:
    bad = {**_ENTRY, "flags": {"kv_cache_dtype": "int8"}}
    with pytest.raises(SettingsError) as err:
        load_settings(_with(models={"small": bad}))
    assert len(err.value.lines) == 1
    assert err.value.lines[0].startswith("settings: models['small'] would not be valid settings: kv_cache_dtype='int8'")


def test_the_second_seeds_model_is_in_the_default_catalogue() -> None:
    s = load_settings(_with(model="qwen38"))
    qwen38 = load_settings(profile_data("qwen38"))
    for key in ("model_repo", "model_dir", "served_model_name", "kv_cache_dtype", "max_model_len", "tool_call_parser"):
        assert getattr(s, key) == getattr(qwen38, key), key


def test_a_version_that_arrived_as_a_number_says_to_quote_it() -> None:
    """`--data python_version=3.10` reaches the settings as the float 3.1: the line says why and what to type."""
    with pytest.raises(SettingsError) as err:
        load_settings(_with(python_version=3.1))
    assert err.value.lines == [
        'settings: python_version=3.1 is not allowed: must be one of "3.10" to "3.13"; it arrived as the number 3.1 '
        "(3.10 reads as 3.1): quote it, --data 'python_version=\"X.Y\"'"
    ]
    assert load_settings(_with(python_version=3.11)).python_version == "3.11"  # a float that kept its text passes


@pytest.mark.parametrize(
    "key, url",
    [
        ("pip_index_url", "http://10.0.0.2/simple"),
        ("torch_index_url", "http://10.0.0.2/whl/cu128"),
        ("git_mirror_prefix", "http://10.0.0.2/"),
        ("hf_endpoint", "http://10.0.0.2"),
        ("nvidia_repo_url", "http://10.0.0.2/cuda/{distro}/x86_64/"),  # its keyring comes from the same URL
    ],
)
def test_a_plain_http_mirror_is_refused_unless_allowed_and_then_warned(key: str, url: str) -> None:
    """The attack: anyone on the way rewrites what a plain-http mirror serves. Refused in one line; allowed on a
    trusted LAN, every run says so (once per mirror, however many hosts use it)."""
    with pytest.raises(SettingsError) as err:
        load_settings({**profile_data(), key: url})
    assert len(err.value.lines) == 1, err.value.lines
    assert err.value.lines[0].startswith(f"settings: {key}") and "allow_plain_http_mirrors: true" in err.value.lines[0]
    s = load_settings({**profile_data(), key: url, "allow_plain_http_mirrors": True})
    warned = plain_http_warnings({"rig1": s, "rig2": s})
    assert len(warned) == 1 and warned[0].startswith(f"{key} {url} is plain http://")
    assert plain_http_warnings({"rig1": load_settings(profile_data())}) == []


def test_a_tag_in_a_git_ref_setting_names_the_commit_it_should_be() -> None:
    """A moved tag must not choose the code: a known tag is refused with its commit, an unknown one with the rule;
    the defaults are commits, so a default host of either kind is not refused."""
    with pytest.raises(SettingsError) as err:
        load_settings({**profile_data(), "cutlass_ref": "v4.4.2"})
    assert len(err.value.lines) == 1, err.value.lines
    assert "use its commit da5e086dab31d63815acafdac9a9c5893b1c69e2 (NVIDIA/cutlass v4.4.2)" in err.value.lines[0]
    with pytest.raises(SettingsError) as err:
        load_settings({**profile_data("qwen38"), "triton_src_ref": "v3.6.0"})
    assert len(err.value.lines) == 1, err.value.lines
    assert "use its commit 7c56a5e40f7fd928dfd5c72902d5def0097db73a (triton-lang/triton v3.6.0)" in err.value.lines[0]
    with pytest.raises(SettingsError) as err:  # a tag whose commit is not recorded: the rule, and where to read it
        load_settings({**profile_data(), "cutlass_ref": "v4.5.0"})
    assert len(err.value.lines) == 1 and "must be a 40-character lower-case commit SHA" in err.value.lines[0]
    for profile in (None, "qwen38"):  # the defaults: every git source a commit, nothing refused
        s = load_settings(profile_data(profile))
        assert SHA40.match(s.cutlass_ref) and SHA40.match(s.triton_src_ref)
