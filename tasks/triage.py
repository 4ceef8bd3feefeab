"""Triage (on demand): one archive per host for a bug report, secrets redacted, fetched to ./triage/.

The stage lives in vllm_rig/stages/triage/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.triage.deploy import triage

run_stage(triage)
