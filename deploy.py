"""vllm-rig: provision a dual RTX 2080 Ti box to serve a 27B FP8 model with the vLLM SM75 fork.

    pyinfra inventory.py deploy.py

Reads like a table of contents: one stage per file under tasks/, in order. Each stage file also
runs alone (`pyinfra inventory.py tasks/<stage>.py`). Settings are checked for every host first;
a bad value stops the run before anything touches a host.
"""

from pyinfra import local

from vllm_rig.context import ensure_locks, stop_on_bad_settings

stop_on_bad_settings()
ensure_locks()  # every pip install on a box goes through a hashed lock (a missing one: written on first use)

local.include("tasks/preflight.py")  # read-only checks; a failing host stops here
local.include("tasks/model_start.py")  # the model download starts in the background, before any apt or git work
local.include("tasks/driver.py")  # pinned, held driver; one reboot when needed; boot-time GPU guard
local.include("tasks/model_resume.py")  # a download the driver's reboot stopped goes on; a running one is left
local.include("tasks/cuda.py")  # CUDA toolkit, pinned
local.include("tasks/runtime.py")  # venv, the fork built with FlashInfer's SM75 fix and FlashQLA; safe switch
local.include("tasks/model_finish.py")  # wait for the download (progress, timeout), verified by sha256
local.include("tasks/verify.py")  # GPU/NVLink/P2P/NCCL verdict after a change, GPUs free
local.include("tasks/service.py")  # the seed's unit from settings, API key, proven by a real completion
local.include("tasks/lan.py")  # nginx in front for the LAN: the key on every path, TLS, client networks
local.include("tasks/front.py")  # front_of: one URL for several boxes of one model (nginx upstream); else nothing
local.include("tasks/chat_page.py")  # chat_page: Open WebUI behind nginx on its own port (off by default)
local.include("tasks/models_keep.py")  # the served model recorded; models beyond models_keep removed
local.include("tasks/summary.py")  # per host: what changed, each stage's time, the next step (URL, model, key, curl)
# On demand: tasks/bench.py (the seed's benchmark), tasks/switch_model.py (another catalogue model),
# tasks/fork_releases.py and tasks/update_fork.py (a newer fork release, switched to only if not slower).
