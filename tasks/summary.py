"""Summary: the last step of deploy.py: per host, what each stage changed and how long it took, then the next
step (the client URL, the model name, the API key, the CA file, a curl line that works). Changes nothing.

The stage lives in vllm_rig/stages/summary/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.summary.deploy import summarize

run_stage(summarize)
