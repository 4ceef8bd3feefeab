# Profile "qwen38": the second setup. Hosts in inventory/hosts.yml with `profile: qwen38`
# get these on top of group_data/all.py: Qwen3.8-27B-FP8, FP16 KV cache, 128K context, qwen3_xml tools,
# 2048-token chunks, temperature 0.1, 175 W power limit.

runtime_kind = "fork"  # the second setup ran weicj's fork (its own engine)
model_repo = "Qwen/Qwen3.8-27B-FP8"  # the official FP8 checkpoint
model_dir = "/opt/vllm-rig/models/Qwen3.8-27B-FP8"  # where the checkpoint lives
served_model_name = "qwen38-27b"  # model name clients ask for
gpu_power_limit_w = 175  # the second setup's power limit
device_ids = None  # the second setup selects no GPUs (no CUDA_VISIBLE_DEVICES)
generation_config = "vllm"  # --generation-config vllm
kv_cache_dtype = "auto"  # FP16 KV cache (the second setup found INT8 KV breaks MTP)
max_model_len = 131072  # 128K context
mamba_cache_mode = "align"  # prefix caching on the hybrid GDN model
max_num_batched_tokens = 2048  # chunk size the second setup recommends with MTP3
async_scheduling = None  # not set in the second setup's command
skip_mm_profiling = False  # not set in the second setup's command
reasoning_config = None  # not set in the second setup's command
default_thinking_token_budget = None  # the second setup sets no thinking budget
default_chat_template_kwargs = None  # not set in the second setup's command
tool_call_parser = "qwen3_xml"  # the second setup's tool-call parser
chat_template_content_format = None  # not set in the second setup's command
override_generation_config = {"temperature": 0.1}  # the second setup's sampling override
cpu_offload_gb = None  # not set in the second setup's command
disable_uvicorn_access_log = False  # not set in the second setup's command
omp_num_threads = None  # the second setup sets no environment
vllm_env = {}  # the second setup sets no environment
