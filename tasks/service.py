"""Service: the system user, the API key, the reference setup's unit rendered from settings, started, and proven to
generate (a real chat completion with the key, warm-up, known answers) after every change; every start of
the unit proves itself and waits for free GPUs, and a timer runs the watchdog.

The stage lives in vllm_rig/stages/service/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.service.deploy import install_service

run_stage(install_service)
