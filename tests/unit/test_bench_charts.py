"""Benchmark charts (vllm_rig/stages/bench/charts.py) drawn from the reference box's own runs (seed 000, 6.2 and
6.3): the compare chart's bars must equal the seed's separately computed summary table (6.4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_rig.stages.bench import charts

SEED = Path(__file__).parent / "fixtures" / "seed_bench"
# Seed 000, section 6.4: metric -> (FP16 mean, FP8 mean), TTFT in s, prefill/decode tok/s, MTP in percent.
SEED_SUMMARY = {
    "20K": {"ttft_s": (13.193, 13.137), "prefill_tps": (1296.5, 1297.5), "decode_tps": (85.2, 84.5)}
    | {"acceptance": (75.4, 75.4)},
    "60K": {"ttft_s": (45.888, 45.813), "prefill_tps": (1112.3, 1114.2), "decode_tps": (106.3, 96.3)}
    | {"acceptance": (74.7, 69.8)},
}


def _load(label: str) -> dict:
    return json.loads((SEED / f"{label}.json").read_text())


def _bars(ax) -> list[float]:
    return [patch.get_height() for patch in ax.patches]


def test_compare_chart_is_the_seeds_summary_table() -> None:
    fig = charts.compare_chart(_load("FP16-KV"), _load("FP8-KV"))
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [charts.TITLES[k] for k, _, _ in charts.METRICS]
    for ax, (key, _, _) in zip(axes, charts.METRICS, strict=True):
        fp16, fp8 = _bars(ax)[:2], _bars(ax)[2:]  # A's bars per size, then B's
        for i, size in enumerate(("20K", "60K")):
            want16, want8 = SEED_SUMMARY[size][key]
            assert fp16[i] == pytest.approx(want16, abs=0.06), (key, size)
            assert fp8[i] == pytest.approx(want8, abs=0.06), (key, size)
    notes = [t.get_text() for t in axes[2].texts][-2:]  # after the bar labels
    assert notes == ["-0.8%", "-9.4%*"]  # the seed: 20K decode -0.8%, 60K -9.4% from two runs each (starred)
    assert "fewer than 3 samples (60K: 2 and 2 runs)" in fig.get_supxlabel()


def test_run_chart_has_a_bar_per_run_and_each_sizes_mean() -> None:
    result = _load("FP8-KV")
    fig = charts.run_chart(result)
    decode = fig.axes[2]
    assert _bars(decode) == [88.0, 77.6, 87.8, 87.1, 105.6]  # seed 000, 6.2's decode column
    means = sorted(round(seg[0][1], 2) for c in decode.collections for seg in c.get_segments())
    assert means == [84.47, 96.35]  # the dashed mean of each size
    assert [t.get_text() for t in fig.axes[3].xaxis.get_ticklabels()][0] == "20K run1\n17,042 tok"


def test_the_command_writes_pngs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "rig1-FP16-KV.json", tmp_path / "rig1-FP8-KV.json"
    a.write_text((SEED / "FP16-KV.json").read_text())
    b.write_text((SEED / "FP8-KV.json").read_text())
    assert charts.main(["compare", str(a), str(b)]) == 0
    png = tmp_path / "rig1-FP16-KV-vs-rig1-FP8-KV.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "20K Decode   85.2 tok/s     84.5 tok/s     -0.8%" in capsys.readouterr().out
    assert charts.main(["run", str(b)]) == 0
    assert (tmp_path / "rig1-FP8-KV.png").read_bytes()[:4] == b"\x89PNG"
    assert charts.main(["run", str(tmp_path / "absent.json")]) == 2
