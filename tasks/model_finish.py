"""Model (finish): wait for the download tasks/model_start.py started, with a progress line (bytes of the
total) and a timeout, then trust only `model_fetch.py check` (the marker written after every file's sha256
matched). A failed or killed download fails the host with the fetch's own last message; the next run
continues it. Runs alone too: it then only checks (and waits for a download that is running).

The stage lives in vllm_rig/stages/model/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.model.finish import finish_model_download

run_stage(finish_model_download)
