"""Status (on demand, read-only): what state each host is in, one table per host (`--data status_format=json`).

The stage lives in vllm_rig/stages/status/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.status.deploy import show_status

run_stage(show_status)
