"""The vLLM server's command line and environment, rendered from settings.

Flag order follows the first seed's unit so the rendered unit reads like the one users know.
Unset (null/false) settings leave their flag out, which is how the second seed's shorter command
comes out of the same code.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from vllm_rig.known import server_interface
from vllm_rig.stages.runtime import kinds

if TYPE_CHECKING:
    from vllm_rig.settings import Settings


def _json(value: Any) -> str:
    """Compact JSON as the seeds write it: no spaces after separators."""
    return json.dumps(value, separators=(",", ":"))


def server_args(s: Settings, model_path: str) -> list[str]:
    """Arguments after `python -m vllm.entrypoints.openai.api_server`: the settings' flags, then extras."""
    return settings_args(s, model_path) + list(s.vllm_extra_args)


def settings_args(s: Settings, model_path: str) -> list[str]:
    """The flags rendered from named settings (vllm_extra_args excluded)."""
    args: list[str] = ["--host", s.server_host, "--port", str(s.vllm_port), "--model", model_path]
    args += ["--served-model-name", s.served_model_name, "--dtype", s.dtype]
    args += ["--tensor-parallel-size", str(s.tensor_parallel_size)]
    if s.device_ids is not None and _server(s).has_device_ids:
        args += ["--device-ids", ",".join(str(i) for i in s.device_ids)]
    if s.generation_config is not None:
        args += ["--generation-config", s.generation_config]
    if s.quantization is not None:
        args += ["--quantization", s.quantization]
    if s.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", s.kv_cache_dtype]
    args += ["--max-model-len", str(s.max_model_len)]
    if s.mamba_cache_mode is not None:
        args += ["--mamba-cache-mode", s.mamba_cache_mode]
    if s.enable_prefix_caching:
        args.append("--enable-prefix-caching")
    args += ["--max-num-seqs", str(s.max_num_seqs), "--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    if s.enable_chunked_prefill:
        args.append("--enable-chunked-prefill")
    if s.async_scheduling is not None:
        args.append("--async-scheduling" if s.async_scheduling else "--no-async-scheduling")
    if s.skip_mm_profiling:
        args.append("--skip-mm-profiling")
    if s.reasoning_parser is not None:
        args += ["--reasoning-parser", s.reasoning_parser]
    reasoning = reasoning_config(s)
    if reasoning is not None:
        args += ["--reasoning-config", _json(reasoning)]
    if s.default_chat_template_kwargs is not None:
        args += ["--default-chat-template-kwargs", _json(s.default_chat_template_kwargs)]
    if s.enable_auto_tool_choice:
        args.append("--enable-auto-tool-choice")
    if s.tool_call_parser is not None:
        args += ["--tool-call-parser", s.tool_call_parser]
    if s.chat_template_content_format is not None:
        args += ["--chat-template-content-format", s.chat_template_content_format]
    args += ["--gpu-memory-utilization", _number(s.gpu_memory_utilization)]
    if s.additional_config is not None:
        args += ["--additional-config", _json(s.additional_config)]
    args += ["--speculative-config", _json({"method": "mtp", "num_speculative_tokens": s.num_speculative_tokens})]
    args += ["--compilation-config", _json(compilation_config(s))]
    if s.override_generation_config is not None:
        args += ["--override-generation-config", _json(s.override_generation_config)]
    if s.cpu_offload_gb is not None:
        args += ["--cpu-offload-gb", _number(s.cpu_offload_gb)]
    if s.disable_uvicorn_access_log:
        args.append("--disable-uvicorn-access-log")
    return args


def _server(s: Settings) -> server_interface.ServerInterface:
    return kinds.of(s).server(s)


def reasoning_config(s: Settings) -> dict[str, Any] | None:
    """--reasoning-config's value: the markers, and the thinking budget where the server reads it there (the
    patched release; the first seed writes it last)."""
    budget = s.default_thinking_token_budget
    if budget is None or not _server(s).budget_in_reasoning_config:
        return s.reasoning_config
    return {**(s.reasoning_config or {}), server_interface.BUDGET_KEY: budget}


def thinking_budget_env(s: Settings) -> str | None:
    """The fork's VLLM_DEFAULT_THINKING_TOKEN_BUDGET value, where the server reads the budget from there."""
    budget = s.default_thinking_token_budget
    return None if budget is None or _server(s).budget_in_reasoning_config else str(budget)


def visible_devices(s: Settings) -> str | None:
    """CUDA_VISIBLE_DEVICES for device_ids, on the fork's line only: it has no --device-ids flag (the patched
    release takes the seed's --device-ids and sets no CUDA_VISIBLE_DEVICES, as the seed does)."""
    if s.device_ids is None or _server(s).has_device_ids:
        return None
    return ",".join(str(i) for i in s.device_ids)


def compilation_config(s: Settings) -> dict[str, Any]:
    return {
        "cudagraph_mode": s.cudagraph_mode,
        "cudagraph_capture_sizes": list(s.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": s.max_cudagraph_capture_size,
    }


def _number(value: float) -> str:
    """0.92 -> "0.92", 0.0 -> "0": numbers as a person writes them."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
