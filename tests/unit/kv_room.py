"""KV room: does a max_model_len fit the cards, for a hybrid (Gated DeltaNet + full attention) Qwen 27B under
vLLM's v1 engine? An estimate from the checkpoint's size and config, made before anything is downloaded; the
server's own "GPU KV cache size: N tokens" line is what start_check records once it runs.

What vLLM needs (per card, for one request of max_model_len), as its KV cache manager lays a hybrid model out
(vLLM's kv_cache_utils / kv_cache_interface; worked through and confirmed against three start logs in
Aiakos1818/qwen3-8-27b-dual-2080ti-vllm docs/kv-optimization/GPU_MEMORY_CALCULATION.md §3, @01850c60):

- a full-attention layer holds K and V: 2 x (KV heads / TP) x head_dim x (1 byte FP8 | 2 bytes FP16) per token;
- a linear-attention layer holds a fixed state: conv (kernel - 1 + speculative tokens) x conv_dim / TP in FP16,
  plus temporal (value heads / TP) x value dim x key dim in FP32;
- the attention block size grows (in steps of 16 tokens) until one block's page is at least one state's page,
  and both pages are padded to that size;
- layers share pages in groups of the smaller layer count (the MTP layer joins the full-attention ones) when
  the larger count is at least 1.5 times it; the linear layers fill ceil(linear / group) groups;
- one request needs ceil(max_model_len / block) attention blocks, plus (2 + speculative tokens) blocks per
  linear group with mamba_cache_mode "align"; bytes = group size x page x blocks.
For Qwen3.8 27B, TP2, FP8 KV, MTP3 this gives 27,852,800 x (ceil(L / 1600) + 15) bytes: 4,985,651,200 at
262,144, the figure that document checked against vLLM's own refusals ("4.38 GiB KV cache is needed" at 245,760).

What the cards have (per card): vLLM's budget is total memory x gpu_memory_utilization; from it come the weights
and what is not KV (CUDA context, NCCL, CUDA graphs, the activation peak of one max_num_batched_tokens chunk).
- Weights per card: the checkpoint's bytes / TP plus REPLICATED_ALLOWANCE for what every card holds whole. The
  allowance is 1 GiB; the measured excess of the FP8 checkpoint was 0.59 GiB (14.96 GiB per card from 28.75
  GiB at TP2, "Model loading took 14.96 GiB", same document §2.4). For an int4 checkpoint this is belief.
- Not KV: measured on the same model and cards with the FP8 checkpoint (same document §4.4): 1,722 MiB at
  2,048-token chunks, 2,068 MiB at 4,096. Between and above those, linear in the chunk; below 2,048 the 2,048
  figure (not extrapolated downwards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tests.unit.checkpoints import GIB, HybridGeometry

MIB = 1 << 20
BLOCK_ALIGNMENT = 16  # tokens: the attention block size is a multiple of this
REPLICATED_ALLOWANCE = GIB
NOT_KV_MEASURED_MIB = ((2048, 1722), (4096, 2068))  # (max_num_batched_tokens, MiB per card), FP8 checkpoint
CARD_MIB_2080TI_22G = 22528  # what a 22 GB RTX 2080 Ti reports (nvidia-smi, the GPU memory document §4.4)


def kv_bytes_per_element(kv_cache_dtype: str) -> int:
    """1 for the FP8 KV dtypes, 2 for "auto" (the model's FP16 with dtype half); INT8 KV is refused by the settings."""
    if kv_cache_dtype.startswith("fp8"):
        return 1
    if kv_cache_dtype == "auto":
        return 2
    raise ValueError(f"no KV room estimate for kv_cache_dtype {kv_cache_dtype!r}")


@dataclass(frozen=True)
class KvLayout:
    block_tokens: int  # attention block size in tokens
    page_bytes: int  # one block's page of one layer (attention and state pages padded equal)
    group_size: int  # layers that share one page
    state_blocks: int  # blocks the linear-attention groups need (fixed, not per token)

    def blocks(self, max_model_len: int) -> int:
        return math.ceil(max_model_len / self.block_tokens) + self.state_blocks

    def bytes_needed(self, max_model_len: int, spare_blocks: int = 0) -> int:
        """Per card, for one request of max_model_len (plus spare_blocks for copy-on-write headroom)."""
        return self.group_size * self.page_bytes * (self.blocks(max_model_len) + spare_blocks)

    def longest_fitting(self, room_bytes: int, spare_blocks: int = 0) -> int:
        """The longest max_model_len whose need fits room_bytes (a multiple of the block size; 0 if none)."""
        slots = room_bytes // (self.group_size * self.page_bytes)
        return max(0, (slots - self.state_blocks - spare_blocks) * self.block_tokens)


def layout(
    g: HybridGeometry, *, tp: int, kv_cache_dtype: str, num_speculative_tokens: int, mamba_cache_mode: str | None
) -> KvLayout:
    """vLLM's KV layout of the hybrid model, per card (module docstring)."""
    if mamba_cache_mode != "align":
        raise ValueError("the KV room estimate knows mamba_cache_mode 'align' only (what the catalogue sets)")
    per_token = 2 * max(1, g.num_key_value_heads // tp) * g.head_dim * kv_bytes_per_element(kv_cache_dtype)
    conv_dim = g.linear_key_head_dim * g.linear_num_key_heads * 2 + g.linear_value_head_dim * g.linear_num_value_heads
    conv = (g.linear_conv_kernel_dim - 1 + num_speculative_tokens) * (conv_dim // tp) * 2  # FP16
    temporal = (g.linear_num_value_heads // tp) * g.linear_value_head_dim * g.linear_key_head_dim * 4  # FP32
    state = conv + temporal
    block = BLOCK_ALIGNMENT * math.ceil(state / (BLOCK_ALIGNMENT * per_token))
    attention = g.full_attention_layers + (g.mtp_layers if num_speculative_tokens else 0)
    low, high = sorted((attention, g.linear_attention_layers))
    group = low if high >= 1.5 * low else high
    linear_groups = math.ceil(g.linear_attention_layers / group)
    return KvLayout(block, block * per_token, group, linear_groups * (2 + num_speculative_tokens))


def not_kv_mib(max_num_batched_tokens: int) -> float:
    """What is not KV and not weights, per card, at this chunk size (measured points, linear between/above)."""
    (b0, m0), (b1, m1) = NOT_KV_MEASURED_MIB
    return m0 + max(0, max_num_batched_tokens - b0) * (m1 - m0) / (b1 - b0)


def room_bytes(
    *, card_mib: int, gpu_memory_utilization: float, checkpoint_bytes: int, tp: int, max_num_batched_tokens: int
) -> int:
    """Per card: vLLM's budget minus the weights' share and what is not KV."""
    budget = card_mib * MIB * gpu_memory_utilization
    weights = checkpoint_bytes / tp + REPLICATED_ALLOWANCE
    return int(budget - weights - not_kv_mib(max_num_batched_tokens) * MIB)
