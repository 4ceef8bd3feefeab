"""The two reference setups, as data (from the user's two source documents, copied here so the tests need
nothing outside the repository). Flags in their order with their values (None for a bare flag), environment
and unit settings."""

SEED1_ENV = {
    "CUDA_HOME": "/usr/local/cuda",
    "PATH": (
        "/usr/local/cuda/bin:/home/zyyuc/vllm-env-0240-qwopus/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    ),
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/local/cuda/lib64/stubs",
    "PYTHONPATH": "/home/zyyuc/FlashQLA-SM70-SM75",
    "HF_ENDPOINT": "https://hf-mirror.com",
    "VLLM_USE_DEEP_GEMM": "0",
    "OMP_NUM_THREADS": "8",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_QWOPUS_MTP_BF16_DRAFT": "1",
    "VLLM_SM75_SPEC_SYNC_MODE": "safe",
}

SEED1_UNIT = {
    "Type": "simple",
    "User": "zyyuc",
    "WorkingDirectory": "/home/zyyuc/vllm-2080ti-0.24.0-qwopus",
    "ExecStartPre": "/home/zyyuc/check-flashinfer-pr3621-sm75.sh",
    "Restart": "always",
    "RestartSec": "10",
    "TimeoutStartSec": "900",
    "StandardOutput": "append:/home/zyyuc/vllm-0240-main-8000.log",
    "StandardError": "append:/home/zyyuc/vllm-0240-main-8000.log",
    "After": "network-online.target",
    "Wants": "network-online.target",
    "WantedBy": "multi-user.target",
}

SEED1_ARGS = [
    ("--host", "0.0.0.0"),
    ("--port", "8000"),
    ("--model", "/home/zyyuc/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8"),
    ("--served-model-name", "qwen-local"),
    ("--dtype", "half"),
    ("--tensor-parallel-size", "2"),
    ("--device-ids", "0,1"),
    ("--quantization", "fp8"),
    ("--kv-cache-dtype", "fp8_e4m3"),
    ("--max-model-len", "100000"),
    ("--enable-prefix-caching", None),
    ("--max-num-seqs", "1"),
    ("--max-num-batched-tokens", "4096"),
    ("--enable-chunked-prefill", None),
    ("--no-async-scheduling", None),
    ("--skip-mm-profiling", None),
    ("--reasoning-parser", "qwen3"),
    (
        "--reasoning-config",
        '{"reasoning_start_str":"<think>","reasoning_end_str":"</think>","default_thinking_token_budget":4000}',
    ),
    ("--default-chat-template-kwargs", '{"enable_thinking":true}'),
    ("--enable-auto-tool-choice", None),
    ("--tool-call-parser", "qwen3_coder"),
    ("--chat-template-content-format", "string"),
    ("--gpu-memory-utilization", "0.92"),
    ("--additional-config", '{"gdn_prefill_backend":"flashqla_legacy"}'),
    ("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'),
    (
        "--compilation-config",
        '{"cudagraph_mode":"PIECEWISE","cudagraph_capture_sizes":[4],"max_cudagraph_capture_size":4}',
    ),
    (
        "--override-generation-config",
        '{"temperature":0.6,"top_p":0.95,"top_k":20,"min_p":0.0,"presence_penalty":0.0,"repetition_penalty":1.06}',
    ),
    ("--cpu-offload-gb", "0"),
    ("--disable-uvicorn-access-log", None),
]

SEED2_ARGS = [
    ("--host", "0.0.0.0"),
    ("--port", "8000"),
    ("--model", "/path/to/models/Qwen3.8-27B-FP8"),
    ("--served-model-name", "qwen38-27b"),
    ("--dtype", "half"),
    ("--tensor-parallel-size", "2"),
    ("--generation-config", "vllm"),
    ("--max-model-len", "131072"),
    ("--enable-chunked-prefill", None),
    ("--max-num-seqs", "1"),
    ("--max-num-batched-tokens", "2048"),
    ("--override-generation-config", '{"temperature":0.1}'),
    ("--quantization", "fp8"),
    ("--gpu-memory-utilization", "0.92"),
    ("--mamba-cache-mode", "align"),
    ("--enable-prefix-caching", None),
    ("--reasoning-parser", "qwen3"),
    ("--tool-call-parser", "qwen3_xml"),
    ("--enable-auto-tool-choice", None),
    ("--additional-config", '{"gdn_prefill_backend":"flashqla_legacy"}'),
    ("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'),
    (
        "--compilation-config",
        '{"cudagraph_mode":"PIECEWISE","cudagraph_capture_sizes":[4],"max_cudagraph_capture_size":4}',
    ),
]
