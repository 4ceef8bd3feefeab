"""Preflight: every read-only check before anything changes, one verdict per host.

The stage lives in vllm_rig/stages/preflight/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.preflight.deploy import check_host

run_stage(check_host)
