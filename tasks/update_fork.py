"""Guarded fork update (on demand): build the new fork commit beside the running runtime, prove it, benchmark
both and switch only when decode and prefill are not worse than fork_update_margin_pct; else keep the old one.

    pyinfra inventory.py tasks/update_fork.py --data fork_ref=<commit from tasks/fork_releases.py>

The stage lives in vllm_rig/stages/update/deploy.py; this file is its entry."""

from vllm_rig.context import ensure_locks, run_stage
from vllm_rig.stages.update.deploy import update_fork

ensure_locks()  # the new commit's lock: kept, or written on its first use
run_stage(update_fork)
