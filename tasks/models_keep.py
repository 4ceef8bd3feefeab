"""Models (keep): record the served model, keep models_keep earlier ones, remove older ones (space printed).

The stage lives in vllm_rig/stages/model/keep.py; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.model.keep import keep_models

run_stage(keep_models)
