"""The KV room estimate (tests/unit/kv_room.py) and the int4 catalogue entry it justifies.

The estimate is checked against the figures vLLM itself printed on the same model and cards (the owner's GPU
memory document: its "KV cache is needed" refusals and its per-card use), then the `qwen38-awq` entry is shown
to fit 2 x 22 GB at gpu_memory_utilization 0.92 with FP8 KV, and to need FP8 KV for its context.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit import checkpoints, kv_room
from tests.unit.groupdata import profile_data
from tests.unit.test_unit_parity import _argv
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.service.unit import render_unit
from vllm_rig.validation import load_settings

AWQ = checkpoints.CYANKIWI_QWEN38_AWQ_INT4
CARD = kv_room.CARD_MIB_2080TI_22G


def _entry(**changes: Any) -> Settings:
    return load_settings({**profile_data(), "model": "qwen38-awq", **changes})


def _layout(s: Settings) -> kv_room.KvLayout:
    return kv_room.layout(
        checkpoints.CHECKPOINTS[s.model_repo].geometry,
        tp=s.tensor_parallel_size,
        kv_cache_dtype=s.kv_cache_dtype,
        num_speculative_tokens=s.num_speculative_tokens,
        mamba_cache_mode=s.mamba_cache_mode,
    )


def _room(s: Settings) -> int:
    return kv_room.room_bytes(
        card_mib=CARD,
        gpu_memory_utilization=s.gpu_memory_utilization,
        checkpoint_bytes=checkpoints.CHECKPOINTS[s.model_repo].total_bytes,
        tp=s.tensor_parallel_size,
        max_num_batched_tokens=s.max_num_batched_tokens,
    )


@pytest.mark.parametrize(
    ("max_model_len", "needed"),
    [(262144, 4_985_651_200), (245760, 4_707_123_200), (233600, 4_484_300_800)],  # the document's §3.5/§3.6 rows
)
def test_the_layout_gives_what_vllm_said_it_needs(max_model_len: int, needed: int) -> None:
    """TP2, FP8 KV, MTP3, align: block 1600 ("Setting attention block size to 1600 tokens"), 17-layer groups
    ("Add 3 padding layers"), 15 state blocks; 245,760 is the one vLLM refused at 4.19 GiB ("4.38 GiB ... is
    needed") and 233,600 the longest it offered instead."""
    fp8 = kv_room.layout(
        AWQ.geometry, tp=2, kv_cache_dtype="fp8_e4m3", num_speculative_tokens=3, mamba_cache_mode="align"
    )
    assert (fp8.block_tokens, fp8.page_bytes, fp8.group_size, fp8.state_blocks) == (1600, 1_638_400, 17, 15)
    assert fp8.bytes_needed(max_model_len) == needed
    assert fp8.longest_fitting(4_500_000_000) == 233600  # vLLM's "estimated maximum model length is 233600"


def test_the_estimate_of_one_card_matches_the_owners_int4_figure() -> None:
    """Aiakos's int4 256K profile: 17.5 GB per card with a 5.3e9-byte pool at 1,024-token chunks (README@03164047).
    Weights (half the checkpoint + the allowance) + what is not KV + the pool come within 5% of it."""
    used = AWQ.total_bytes / 2 + kv_room.REPLICATED_ALLOWANCE + kv_room.not_kv_mib(1024) * kv_room.MIB + 5.3e9
    assert used / checkpoints.GIB == pytest.approx(17.5, rel=0.05)


def test_the_int4_entry_fits_two_22_gb_cards_at_092_with_fp8_kv() -> None:
    s = _entry()
    assert (s.tensor_parallel_size, s.gpu_memory_utilization, s.kv_cache_dtype) == (2, 0.92, "fp8_e4m3")
    assert s.max_model_len == 262144 == AWQ.geometry.max_position_embeddings  # the model's own limit
    layout, room = _layout(s), _room(s)
    needed = layout.bytes_needed(s.max_model_len)
    assert needed == 4_985_651_200
    assert room > 8.0e9  # ~7,958 MiB of KV room per card: 0.92 x 22,528 MiB - 10.8 GiB of weights - 1,722 MiB
    assert needed + layout.bytes_needed(0, spare_blocks=16) - layout.bytes_needed(0) < room  # with 16 blocks spare
    assert layout.longest_fitting(room) >= s.max_model_len


def test_fp16_kv_would_not_hold_the_entrys_context() -> None:
    """Why the entry's KV is FP8: at FP16 a block holds half the tokens, and 262,144 needs 9.55e9 bytes per card."""
    s = _entry()
    fp16 = kv_room.layout(AWQ.geometry, tp=2, kv_cache_dtype="auto", num_speculative_tokens=3, mamba_cache_mode="align")
    room = _room(s)
    assert fp16.bytes_needed(262144) > room
    assert fp16.longest_fitting(room) == 227200 < s.max_model_len


def test_the_entry_renders_without_quantization_and_with_its_flags() -> None:
    """vLLM takes compressed-tensors from config.json when --quantization is absent; "fp8" would be refused
    ("Quantization method specified in the model config ... does not match")."""
    for kind in ("upstream", "fork"):
        s = _entry(runtime_kind=kind)
        argv = _argv(render_unit(s, Layout.of(s)))
        assert "--quantization" not in argv, kind
        pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        assert pairs["--model"] == "/opt/vllm-rig/models/Qwen3.8-27B-AWQ-INT4", kind
        assert (pairs["--dtype"], pairs["--kv-cache-dtype"], pairs["--max-model-len"]) == ("half", "fp8_e4m3", "262144")
        assert pairs["--served-model-name"] == "qwen38-27b-awq"
        assert '"num_speculative_tokens":3' in pairs["--speculative-config"]  # the checkpoint keeps mtp.*
    assert AWQ.mtp_weights and AWQ.quant_method == "compressed-tensors"


def test_the_known_sizes_fit_the_model_share_of_the_disk_check() -> None:
    """The disk floor counts ~80 GB of build and ~29 GB of model for a compile (110), ~4 GB of wheels and ~29 GB of
    model for the upstream wheels (40); the int4 checkpoint is ~21.0 GB."""
    from vllm_rig.stages.runtime.kinds.base import COMPILE_DISK_GB, WHEEL_DISK_GB

    assert len(AWQ.files) == 5 and AWQ.total_bytes == 21_018_000_000
    assert profile_data()["min_free_disk_gb"] is None  # by the runtime kind
    assert AWQ.total_bytes / checkpoints.GB < COMPILE_DISK_GB - 80
    assert AWQ.total_bytes / checkpoints.GB < WHEEL_DISK_GB - 4
