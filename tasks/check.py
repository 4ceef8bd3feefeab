"""Check (on demand, read-only): SSH, root or passwordless sudo and python3 on each box, then the preflight
(tasks/preflight.py's verdict: OS, disk, GPUs, BAR1, Secure Boot, driver, model source). bin/rig check is this.

The stage lives in vllm_rig/stages/check/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.core.run import host_failed
from vllm_rig.stages.check.deploy import first_contact
from vllm_rig.stages.preflight.deploy import check_host

run_stage(first_contact)
if not host_failed():
    run_stage(check_host)
