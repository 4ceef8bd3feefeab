"""Bench (on demand, not part of deploy.py): the first seed's benchmark against the running service.

The stage lives in vllm_rig/stages/bench/; this file is its entry (it also runs alone)."""

from vllm_rig.context import settings
from vllm_rig.stages.bench.deploy import bench

bench(settings())
