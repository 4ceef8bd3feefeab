"""Verify: the GPU/NVLink/P2P/NCCL verdict (vllm_rig/host/gpu_verdict.py) in the runtime venv, after a change.

The stage lives in vllm_rig/stages/verify/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.verify.deploy import verify_gpus

run_stage(verify_gpus)
