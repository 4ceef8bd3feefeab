"""Rollback (on demand): the previous runtime back in place and the service restarted (bin/rig rollback).

The stage lives in vllm_rig/stages/rollback/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.rollback.deploy import roll_back

run_stage(roll_back)
