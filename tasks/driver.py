"""Driver: NVIDIA's apt repository, the exact driver pinned and held, nouveau off, DKMS with headers for
this and future kernels, a reboot only when the loaded module is not the installed one, and the
boot-time GPU guard (module present, persistence, power limit, all GPUs visible).

The stage lives in vllm_rig/stages/driver/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.driver.deploy import install_driver

run_stage(install_driver)
