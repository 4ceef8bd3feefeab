"""Runtime: the venv with the pinned torch stack, the SM75 vLLM fork built at a pinned commit with
FlashInfer's SM75 fix and FlashQLA, named by its build fingerprint, checked, then switched in.

The stage lives in vllm_rig/stages/runtime/; this file is its entry (it also runs alone)."""

from vllm_rig.context import ensure_locks, run_stage
from vllm_rig.stages.runtime.deploy import install_runtime

ensure_locks()
run_stage(install_runtime)
