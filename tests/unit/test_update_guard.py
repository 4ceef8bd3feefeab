"""The guarded update's rule: decode and prefill at every size within the margin, else the old runtime stays."""

from __future__ import annotations

from vllm_rig.stages.update.guard import worse


def _bench(**sizes: tuple[float | None, float | None]) -> dict:
    return {"summary": {size: {"decode_tps": d, "prefill_tps": p, "n": 3} for size, (d, p) in sizes.items()}}


def test_as_fast_or_within_the_margin_switches() -> None:
    before = _bench(**{"20K": (85.0, 1300.0), "60K": (80.0, 1200.0)})
    assert worse(before, before, 5.0) == []
    assert worse(before, _bench(**{"20K": (81.0, 1240.0), "60K": (76.1, 1141.0)}), 5.0) == []


def test_slower_decode_or_prefill_at_any_size_keeps_the_old_one() -> None:
    before = _bench(**{"20K": (85.0, 1300.0), "60K": (80.0, 1200.0)})
    problems = worse(before, _bench(**{"20K": (60.0, 1300.0), "60K": (80.0, 1100.0)}), 5.0)
    assert problems == [
        "20K decode 60.0 tok/s is 29.4% below 85.0 (fork_update_margin_pct=5)",
        "60K prefill 1,100.0 tok/s is 8.3% below 1,200.0 (fork_update_margin_pct=5)",
    ]


def test_a_size_or_figure_missing_on_the_new_runtime_is_not_a_pass() -> None:
    before = _bench(**{"20K": (85.0, 1300.0), "60K": (80.0, 1200.0)})
    assert worse(before, _bench(**{"20K": (85.0, 1300.0)}), 5.0) == ["60K: not measured on the new runtime"]
    assert worse(before, _bench(**{"20K": (None, 1300.0), "60K": (80.0, 1200.0)}), 5.0) == [
        "20K decode: not measured on the new runtime"
    ]
    assert worse({"summary": {}}, before, 5.0) == ["the running runtime's benchmark has no results"]
