"""Remove (on demand): what the deploy installed: the service, timers, units, nginx site, runtimes, caches,
state; the model directories only with `--data remove_model=true`, the driver and CUDA only with
`--data remove_driver=true`. A second run changes nothing. bin/rig remove [--with-model] [--with-driver].

The stage lives in vllm_rig/stages/remove/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.remove.deploy import remove_rig

run_stage(remove_rig)
