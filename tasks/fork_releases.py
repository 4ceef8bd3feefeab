"""Fork releases (on demand): the newer releases on the pinned fork line, through the git cache and
git_mirror_prefix, each with the guarded update that tries it.

    pyinfra inventory.py tasks/fork_releases.py

The stage lives in vllm_rig/stages/update/releases.py; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.update.releases import fork_releases

run_stage(fork_releases)
