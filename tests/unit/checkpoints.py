"""What is known of the checkpoints in the model catalogue (group_data/all.py's `models`) before any download:
their files and sizes, their format, and the figures of the architecture that size the KV cache
(tests/unit/kv_room.py).

The download itself never trusts this table: model_preflight asks the HF endpoint for repo@revision's real file
list and sizes and checks the disk against them, and model_fetch checks every file's sha256 against the endpoint's
(vllm_rig/host/model_preflight.py, model_fetch.py). This table is what a catalogue entry's max_model_len and
the disk figures are argued from, with where each number was read and what rests on belief.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1_000_000_000  # the HF mirror's and `hf`'s sizes are decimal
GIB = 1 << 30


@dataclass(frozen=True)
class HybridGeometry:
    """The parts of a Qwen3.5-architecture (Qwen3.6/3.8 27B) config.json that size vLLM's KV cache."""

    full_attention_layers: int  # layer_types "full_attention" (every full_attention_interval-th layer)
    linear_attention_layers: int  # Gated DeltaNet layers: fixed-size state, no per-token KV
    mtp_layers: int  # the MTP draft head's attention layer(s), in the full-attention KV group when MTP is on
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    max_position_embeddings: int


# Qwen/Qwen3.8-27B's config.json (and every quantization of it keeps these): 64 layers, full_attention_interval 4
# -> 16 full-attention + 48 linear-attention; 24 heads / 4 KV heads at head_dim 256; linear heads 16 key / 48
# value at dim 128, conv kernel 4; 262,144 positions; one MTP layer. Read in two public copies: a survey note of
# the Hub's config.json (2026-09-18) and Aiakos1818/qwen3-8-27b-dual-2080ti-vllm
# docs/kv-optimization/GPU_MEMORY_CALCULATION.md §2 (@01850c60), which also gives the vLLM log lines that confirm
# the KV layout derived from them (§3).
QWEN38_27B = HybridGeometry(
    full_attention_layers=16,
    linear_attention_layers=48,
    mtp_layers=1,
    num_key_value_heads=4,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    max_position_embeddings=262144,
)


@dataclass(frozen=True)
class Checkpoint:
    repo: str
    revision: str | None  # the commit the file list was read at; None: not known
    files: tuple[tuple[str, int], ...]  # (path, bytes) of the weight shards
    sizes_exact: bool  # False: the sizes are rounded figures from a third-party reading, not the endpoint's bytes
    quant_method: str  # config.json's quantization_config.quant_method; vLLM takes it from there
    geometry: HybridGeometry
    mtp_weights: bool  # the checkpoint keeps mtp.* (without them MTP's acceptance is 0)
    source: str

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


# cyankiwi/Qwen3.8-27B-AWQ-INT4: compressed-tensors (pack-quantized W4A16, group 32, asymmetric), the vision tower
# in BF16, architecture Qwen3_5ForConditionalGeneration.
#
# Files: the HF mirror's listing itself could not be read from here. The five shard sizes are a third-party
# reading of the Hub's tree API on 2026-09-18 ("5 shards = 21.018 GB, MEASURED sum 2.543+4.968+4.997+4.976+3.534",
# a public research note the search tools found without naming its repository), rounded to the MB; the shard
# names are the usual model-0000N-of-00005.safetensors (belief: the note gives sizes only); the commit is not
# known, so the catalogue entry follows "main". The notes' own figure agrees: 5 shards, about 21.0 GB (19.6 GiB).
# Config and tokenizer files are left out (a few MB).
#
# MTP: Aiakos1818's production weights are a directory of the same name and format, "compressed-tensors, W4A16,
# group32", quantized with linear_attn and mtp left out (qwen3-8-27b-dual-2080ti-vllm docs/upstream-branch.md
# §4.4), and served with MTP (its start check logs an acceptance of ~79%, the section before §4.3). That they are
# this very checkpoint is inferred (that repo does not name its source); that the mtp.* tensors are in the
# public files rests on it.
CYANKIWI_QWEN38_AWQ_INT4 = Checkpoint(
    repo="cyankiwi/Qwen3.8-27B-AWQ-INT4",
    revision=None,
    files=tuple(
        (f"model-0000{i}-of-00005.safetensors", size)
        for i, size in enumerate((2_543_000_000, 4_968_000_000, 4_997_000_000, 4_976_000_000, 3_534_000_000), 1)
    ),
    sizes_exact=False,
    quant_method="compressed-tensors",
    geometry=QWEN38_27B,
    mtp_weights=True,
    source="third-party reading of the Hub's tree API, 2026-09-18 (sizes rounded to the MB; names and commit unknown)",
)

CHECKPOINTS = {c.repo: c for c in (CYANKIWI_QWEN38_AWQ_INT4,)}
