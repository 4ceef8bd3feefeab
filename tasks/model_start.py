"""Model (start): the tools venv with huggingface_hub, the fetcher script, the HF token file, and the download
started as a transient systemd unit, so it runs while the runtime builds and survives an SSH drop.

The stage lives in vllm_rig/stages/model/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage, stop_on_missing_locks
from vllm_rig.stages.model.start import start_model_download

stop_on_missing_locks()
run_stage(start_model_download)
