"""Model (start): the tools venv with huggingface_hub, the fetcher script, the HF token file, and the download
started as a transient systemd unit, so it runs while the runtime builds and survives an SSH drop.

The stage lives in vllm_rig/stages/model/; this file is its entry (it also runs alone)."""

from vllm_rig.context import ensure_locks, run_stage
from vllm_rig.stages.model.start import start_model_download

ensure_locks()
run_stage(start_model_download)
