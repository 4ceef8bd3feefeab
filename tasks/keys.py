"""Keys (on demand): the LAN proxy's client keys: `--data keys_action=list` (the default), or add / revoke with
`--data keys_name=NAME`. bin/rig keys is this.

The stage lives in vllm_rig/stages/keys/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.keys.deploy import manage_keys

run_stage(manage_keys)
