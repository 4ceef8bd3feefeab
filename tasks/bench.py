"""Bench (on demand, not part of deploy.py): the reference setup's benchmark against the running service.

The stage lives in vllm_rig/stages/bench/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.bench.deploy import bench

run_stage(bench)
