"""Bench (on demand, not part of deploy.py): the reference setup's benchmark against the running service.

The stage lives in vllm_rig/stages/bench/; this file is its entry (it also runs alone)."""

from vllm_rig.context import ensure_locks, run_stage
from vllm_rig.stages.bench.deploy import bench

ensure_locks()  # bench runs from the tools venv, installed from its lock
run_stage(bench)
