"""Model (resume): after the driver stage, start again a download that its reboot (or anything else) stopped;
whole files are kept and only the cut one is fetched again. A running or complete download, or a host where
tasks/model_start.py has not run, is left as it is.

The stage lives in vllm_rig/stages/model/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.model.start import resume_model_download

run_stage(resume_model_download)
