"""Model (start): the tools venv with huggingface_hub, the fetcher script, the HF token file, and the download
started as a transient systemd unit, so it runs while the driver, CUDA and the runtime go in and survives an
SSH drop. It runs right after preflight, before any other apt or git work: only what the download itself needs
comes first (python3-venv, the tools venv, the host programs' zip, the token file).

A complete model (its marker matches model_repo@model_revision) is never fetched again; a running download
is re-attached to; a broken one starts again (model_fetch.py cleans what a killed client left). A new repo or
revision downloads beside the old model and model_dir switches to it only once it is complete and verified.
A transient unit does not outlive a reboot: resume_model_download (after the driver stage, which may reboot)
starts it again. tasks/model_finish.py waits for it later.
"""

from pyinfra.api import deploy

from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.core.secrets import Secret
from vllm_rig.paths import HF_TOKEN_FILE, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages import locks
from vllm_rig.stages.model.operations import FetchSpec, model_fetch_resumed, model_fetch_started, secret_env_file
from vllm_rig.stages.model.peers import PeerRole, peer_role, serve_peers, with_peer
from vllm_rig.stages.model.tools_venv import tools_venv

# model_fetch.py runs this version in its process (its download and checksum code); the sandbox tests run it
# against the HF mirror stand-in. The runtime venv cannot hold it (transformers 5.12.1 needs huggingface_hub < 2),
# hence a venv of its own.
HF_HUB_VERSION = "2.4.0"
# bench reads /metrics with it (vllm_rig/host/server_client.py); the control machine's pin (requirements.txt).
PROMETHEUS_CLIENT_VERSION = "0.26.0"
TOOLS = (f"huggingface_hub=={HF_HUB_VERSION}", f"prometheus_client=={PROMETHEUS_CLIENT_VERSION}")


def ensure_tools_venv(s: Settings) -> None:
    """The tools venv from its hashed lock (a no-op when it holds that lock): the model download and bench run
    from it, and a box deployed before bench needed it gets it from the bench itself."""
    tools_venv(
        name=f"Tools venv with {', '.join(TOOLS)}",
        path=Layout.of(s).tools_venv,
        package="huggingface_hub",
        version=HF_HUB_VERSION,
        lock=locks.tools_lock(s).text,
        index_url=s.pip_index_url,
    )


@deploy("Model (start)")
def start_model_download(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    spec = FetchSpec.of(s)
    ensure_tools_venv(s)
    host_programs(layout.host_package)
    secret_env_file(
        name="HF token for the download (root only)" if s.hf_token else "No HF token on the host",
        path=HF_TOKEN_FILE,
        variable="HF_TOKEN",
        value=Secret(s.hf_token),
    )
    role = peer_role() or PeerRole()
    serve_peers(s, role)
    where = f" from model peer {role.source}" if role.source else ""
    model_fetch_started(name=f"Download {spec.name} in the background{where}", spec=with_peer(spec, role, s))


@deploy("Model (resume)")
def resume_model_download(s: Settings) -> None:
    if host_failed():
        return
    role = peer_role() or PeerRole()
    serve_peers(s, role, again=True)  # the source's reboot ended its server too
    spec = with_peer(FetchSpec.of(s), role, s)
    model_fetch_resumed(name=f"Download {spec.name} goes on after a reboot", spec=spec)
