"""Model (finish): wait for the download tasks/model_start.py started, with a progress line (bytes of the
total) and a timeout, then trust only `model_fetch.py check` (the marker written after every file's sha256
matched). A failed or killed download fails the host with the fetch's own last message; the next run
continues it. Runs alone too: it then only checks (and waits for a download that is running)."""

from dataclasses import replace

from pyinfra.api import deploy

from vllm_rig.core.run import host_failed
from vllm_rig.settings import Settings
from vllm_rig.stages.model.operations import FetchSpec, model_fetched
from vllm_rig.stages.model.peers import end_peering, peer_role

# Beyond download_timeout_s (the unit's RuntimeMaxSec), the time its stop and the final check may take.
WAIT_GRACE_S = 120


@deploy("Model (finish)")
def finish_model_download(s: Settings) -> None:
    if host_failed():
        return
    role = peer_role()
    spec = replace(FetchSpec.of(s), peer=role.fetch_arg if role else None)
    model_fetched(
        name=f"Model {spec.name} downloaded and verified",
        spec=spec,
        timeout_s=s.download_timeout_s + WAIT_GRACE_S,
    )
    end_peering()
