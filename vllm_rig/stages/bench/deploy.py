"""Bench (on demand, not part of deploy.py): the reference setup's benchmark against the running service.

    pyinfra inventory.py tasks/bench.py --data bench_label=FP8-KV

Random-UUID prompts, the reference setup's warm-ups, 20K x3 at 256 tokens and 60K x2 at 128 (bench_sizes), streaming;
prints the reference setup's table and keeps the JSON on the host and in ./bench-results/<host>-<label>.json here, with
its chart beside it (<host>-<label>.png: per-run TTFT, prefill, decode, MTP acceptance; stages/bench/charts.py).
For an A/B (e.g. FP8 against FP16 KV cache): bench, deploy with the other setting, bench with another label, then
`python -m vllm_rig.stages.bench.charts compare bench-results/<host>-A.json bench-results/<host>-B.json`
(the reference setup's summary table, and the same as a chart in bench-results/<host>-A-vs-<host>-B.png).
"""

from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, python

from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.core.stamp import streamed
from vllm_rig.paths import STATE_DIR, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.bench.charts import write_run_chart
from vllm_rig.stages.bench.command import bench_command
from vllm_rig.stages.model.start import ensure_tools_venv


@deploy("Bench")
def bench(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    result = f"{STATE_DIR}/bench-{s.bench_label}.json"
    ensure_tools_venv(s)
    host_programs(layout.host_package)
    streamed(
        name=f"Benchmark {s.bench_label}: {s.bench_sizes}",
        command=bench_command(s, layout, s.bench_label, result),
    )
    Path("bench-results").mkdir(exist_ok=True)  # here, on the control side
    local = f"bench-results/{host.name}-{s.bench_label}"
    files.get(name="Results to bench-results/", src=result, dest=f"{local}.json")
    python.call(name=f"Chart {local}.png", function=write_run_chart, json_path=f"{local}.json", png_path=f"{local}.png")
