"""vllm_rig/host/bench.py's pieces without a server: sizes, /metrics totals, stream timing, the A/B comparison
against the seed's own table, prompt lengths and calibration. The program against the stand-in server is
tests/sandbox/test_bench.py."""

from __future__ import annotations

import pytest

from vllm_rig.host import bench, server_client


def test_sizes_parse_and_refuse() -> None:
    assert bench.parse_sizes(bench.DEFAULT_SIZES) == [bench.Size(20000, 3, 256), bench.Size(60000, 2, 128)]
    assert [s.label for s in bench.parse_sizes("20000:1:1,2500:1:1")] == ["20K", "2500"]
    with pytest.raises(Exception, match="TOKENS:RUNS:MAX_TOKENS"):
        bench.parse_sizes("20000:3")


def test_metric_totals_sum_engines_and_skip_lookalikes() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="q"} 10.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="q"} 5.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="q",position="0"} 99.0\n'
        "vllm:spec_decode_num_draft_tokens_total 20\n"
    )
    values = server_client.metric_values(text)
    assert bench.metric_total(values, bench.ACCEPTED) == 15.0
    assert bench.metric_total(values, bench.DRAFTED) == 20.0
    assert bench.metric_total(values, "vllm:spec_decode_num_drafts_total") is None


def test_no_metrics_page_means_no_acceptance_figure() -> None:
    class NoMetrics:
        def metrics(self) -> str:
            raise bench.BenchError("GET /metrics: HTTP 404: Not Found")

    assert bench.SpecCounters.read(NoMetrics()).since(bench.SpecCounters(1.0, 2.0)) == (None, None)


def test_stream_timing_counts_only_chunks_that_carry_tokens() -> None:
    stream = bench.Stream(sent=0.0)
    stream.see(1.0, {"choices": [{"delta": {"role": "assistant", "content": ""}}]})  # role only
    stream.see(2.0, {"choices": [{"delta": {"reasoning_content": "Okay"}}]})
    stream.see(3.0, {"choices": [{"delta": {"reasoning": "so"}}]})  # newer vLLM's field name
    stream.see(4.0, {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "length"}]})
    stream.see(5.0, {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 7}})
    run = bench._run_figures(stream, bench.Size(20, 1, 7), 1, 9.0, 12.0, 5.0)
    assert (run.ttft_s, run.prefill_tps, run.decode_s, run.decode_tps) == (2.0, 10.0, 2.0, 3.0)
    assert run.acceptance == 0.75 and run.e2e_s == 5.0


def _saved(label: str, ttft: list[float], decode: list[float], mtp: list[float], size: str = "20K") -> dict:
    runs = [
        {"size": size, "prompt_tokens": 17000, "ttft_s": t, "prefill_tps": 17000 / t, "decode_tps": d, "acceptance": a}
        for t, d, a in zip(ttft, decode, mtp, strict=True)
    ]
    return {"label": label, "summary": bench.summarize(runs)}


def test_compare_prints_the_seed_summary() -> None:
    """The seed's 20K rows, from its run tables: FP16 (A) against FP8 (B)."""
    fp16 = _saved("FP16", [13.180, 13.236, 13.162], [87.0, 87.0, 81.5], [0.775, 0.771, 0.716])
    fp8 = _saved("FP8", [13.090, 13.138, 13.182], [88.0, 77.6, 87.8], [0.789, 0.683, 0.789])
    fp16["summary"].update(_saved("FP16", [45.733, 46.042], [117.7, 94.9], [0.811, 0.683], "60K")["summary"])
    fp8["summary"].update(_saved("FP8", [45.587, 46.039], [87.1, 105.6], [0.636, 0.761], "60K")["summary"])
    table = bench.compare_table(fp16, fp8)
    rows = {" ".join(line.split()[:2]): line.split()[2:] for line in table.splitlines() if line[:3] in ("20K", "60K")}
    assert table.splitlines()[0].split() == ["Metric", "FP16", "mean", "FP8", "mean", "Difference"]
    assert rows["20K TTFT"] == ["13.193s", "13.137s", "-0.4%"]  # the seed's own figures
    assert rows["20K Decode"] == ["85.2", "tok/s", "84.5", "tok/s", "-0.8%"]
    assert rows["60K TTFT"] == ["45.888s", "45.813s", "-0.2%*"]
    assert rows["60K Decode"] == ["106.3", "tok/s", "96.3", "tok/s", "-9.4%*"]
    assert rows["60K MTP"] == ["74.7%", "69.8%", "-4.9pp*"]
    assert "* fewer than 3 samples (60K: 2 and 2 runs)" in table


def test_prompts_of_one_length_hold_about_the_same_tokens() -> None:
    """The stand-in's rule (ceil(len/4) per word) over ten 1300-word prompts: within 0.5% of each other."""
    rng = bench.random.Random(7)
    prompts = [bench.make_prompt(1300, rng) for _ in range(10)]
    counts = [sum(-(-len(w) // 4) for w in p.split()) for p in prompts]
    assert max(counts) - min(counts) <= 0.005 * min(counts), counts
    assert len({p.split()[0] for p in prompts}) == 10 and all(len(p.split()[0]) == 64 for p in prompts)
    assert all(len(p.split()) == 1301 for p in prompts)


def test_calibration_scales_and_refines() -> None:
    cal = bench.Calibration(base=23.0, per_word=1.5)
    assert cal.words_for(20000) == 13318 and cal.words_for(10) == 1
    cal.refine(13318, 19523)
    assert cal.per_word == pytest.approx((19523 - 23) / 13318) and cal.words_for(19523) == 13318
