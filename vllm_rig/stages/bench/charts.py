"""Benchmark charts (control side, matplotlib): a PNG per bench run and per A/B compare.

    python -m vllm_rig.stages.bench.charts run bench-results/<host>-FP8-KV.json            -> ...-FP8-KV.png
    python -m vllm_rig.stages.bench.charts compare A.json B.json [-o out.png]            -> A-vs-B.png, and the table

A run: per-run bars of TTFT, prefill and decode tok/s and MTP acceptance, each size in its colour with its mean
dashed. A compare: the seed's summary table (metric, A mean, B mean, difference) as grouped bars per size, the
difference written over each pair and starred where a size has fewer than 3 runs. tasks/bench.py writes the run
chart beside the results it fetches.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
from matplotlib.figure import Figure  # noqa: E402

from vllm_rig.host.bench import METRICS, _difference, compare_table, summarize  # noqa: E402

TITLES = {"ttft_s": "TTFT (s)", "prefill_tps": "Prefill (tok/s)", "decode_tps": "Decode (tok/s)"}
TITLES["acceptance"] = "MTP acceptance (%)"
SCALE = {"acceptance": 100.0}  # the rate is stored as 0..1, drawn in percent as the seed's tables write it
SIZE_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3")
AB_COLOURS = ("#8C8C8C", "#4C72B0")


def _value(run: dict[str, Any], key: str) -> float | None:
    value = run.get(key)
    return None if value is None else float(value) * SCALE.get(key, 1.0)


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f}%" if key == "acceptance" else f"{value:.3f}" if key == "ttft_s" else f"{value:,.1f}"


def run_chart(result: dict[str, Any]) -> Figure:
    """One bench.py result: a panel per figure, a bar per measured run."""
    runs = result["runs"]
    sizes = list(dict.fromkeys(r["size"] for r in runs))
    colours = [SIZE_COLOURS[sizes.index(r["size"]) % len(SIZE_COLOURS)] for r in runs]
    ticks = [f"{r['size']} run{r['run']}\n{r['prompt_tokens']:,} tok" for r in runs]
    summary = result.get("summary") or summarize(runs)
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    for ax, (key, _, _) in zip(fig.subplots(2, 2).flat, METRICS, strict=True):
        values = [_value(r, key) for r in runs]
        bars = ax.bar(range(len(runs)), [v or 0.0 for v in values], color=colours)
        ax.bar_label(bars, labels=[_fmt(key, v) for v in values], fontsize=8, padding=2)
        for size in sizes:  # the size's mean, dashed across its bars
            mean = summary.get(size, {}).get(key)
            at = [i for i, r in enumerate(runs) if r["size"] == size]
            if mean is not None and at:
                ax.hlines(mean * SCALE.get(key, 1.0), at[0] - 0.4, at[-1] + 0.4, colors="black", linestyles="dashed")
        ax.set_title(TITLES[key])
        ax.set_xticks(range(len(runs)), ticks, fontsize=8)
        ax.margins(y=0.15)
    label = result.get("label") or "run"
    fig.suptitle(f"{label}: {result.get('model', '')} ({result.get('started', '')}); dashed: mean per size")
    return fig


def compare_chart(a: dict[str, Any], b: dict[str, Any]) -> Figure:
    """The seed's summary table as bars: per metric, A and B means per size, B's difference against A above."""
    sa, sb = a.get("summary") or summarize(a["runs"]), b.get("summary") or summarize(b["runs"])
    sizes = [s for s in sa if s in sb]
    names = (a.get("label") or "A", b.get("label") or "B")
    if names[0] == names[1]:
        names = (f"{names[0]} (A)", f"{names[1]} (B)")
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    few = []
    for ax, (key, _, _) in zip(fig.subplots(2, 2).flat, METRICS, strict=True):
        scale = SCALE.get(key, 1.0)
        for side, (summary, name) in enumerate(((sa, names[0]), (sb, names[1]))):
            values = [summary[s][key] * scale if summary[s][key] is not None else None for s in sizes]
            bars = ax.bar(
                [i + (side - 0.5) * 0.38 for i in range(len(sizes))],
                [v or 0.0 for v in values],
                width=0.38,
                color=AB_COLOURS[side],
                label=name,
            )
            ax.bar_label(bars, labels=[_fmt(key, v) for v in values], fontsize=8, padding=2)
        for i, size in enumerate(sizes):
            star = "*" if min(sa[size]["n"], sb[size]["n"]) < 3 else ""
            if star and key == METRICS[0][0]:
                few.append(f"{size}: {sa[size]['n']} and {sb[size]['n']} runs")
            top = max((v for v in (sa[size][key], sb[size][key]) if v is not None), default=0.0) * scale
            ax.annotate(
                _difference(key, sa[size][key], sb[size][key]) + star,
                (i, top),
                xytext=(0, 16),
                textcoords="offset points",
                ha="center",
                fontweight="bold",
            )
        ax.set_title(TITLES[key])
        ax.set_xticks(range(len(sizes)), [f"{s} mean" for s in sizes])
        ax.margins(y=0.25)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{names[1]} against {names[0]}: mean per size, difference B vs A")
    if few:
        fig.supxlabel(f"* fewer than 3 samples ({'; '.join(few)}): high variance, not significant", fontsize=9)
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def write_run_chart(json_path: str, png_path: str) -> None:
    """For tasks/bench.py's python.call: the chart of a result file just fetched."""
    save(run_chart(json.loads(Path(json_path).read_text())), png_path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vllm_rig.stages.bench.charts", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    one = sub.add_parser("run", help="chart of one bench result")
    one.add_argument("result")
    one.add_argument("-o", "--out", help="PNG path (default: beside the JSON)")
    two = sub.add_parser("compare", help="A/B summary chart (and table) of two bench results")
    two.add_argument("a", help="baseline (A)")
    two.add_argument("b", help="candidate (B): differences are B against A")
    two.add_argument("-o", "--out", help="PNG path (default: A-vs-B.png beside A)")
    args = p.parse_args(argv)
    try:
        if args.what == "run":
            result = json.loads(Path(args.result).read_text())
            out = save(run_chart(result), args.out or Path(args.result).with_suffix(".png"))
        else:
            a, b = (json.loads(Path(x).read_text()) for x in (args.a, args.b))
            for side in (a, b):
                side.setdefault("summary", summarize(side["runs"]))
            print(compare_table(a, b))
            default = Path(args.a).with_name(f"{Path(args.a).stem}-vs-{Path(args.b).stem}.png")
            out = save(compare_chart(a, b), args.out or default)
    except (OSError, ValueError, KeyError) as err:
        print(f"charts: {err}", file=sys.stderr)
        return 2
    print(f"chart: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
