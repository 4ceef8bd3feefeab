"""Switch the served model to another catalogue entry, running only what a switch needs:

    pyinfra inventory.py tasks/switch_model.py --data model=qwen38

the download beside the model that serves (every file's sha256 checked; nothing when it is on disk already),
the unit with the entry's served name and flags, a restart and the proof (a real chat completion), then the
models served before it beyond models_keep removed. The driver, CUDA, runtime and GPU verdict stages are not
run: a model changes none of them. Put `model: <name>` in the host's settings to make it stick; a later
bin/deploy with the old setting switches back.
"""

from pyinfra import local

from vllm_rig.context import stop_on_bad_settings

stop_on_bad_settings()

local.include("tasks/model_start.py")  # the new model downloads beside the old (a no-op when it is on disk)
local.include("tasks/model_finish.py")  # wait for it, every file verified by sha256
local.include("tasks/service.py")  # the unit for the new model, restart, a real completion
local.include("tasks/models_keep.py")  # record it; remove what is beyond models_keep
local.include("tasks/summary.py")  # what changed, and the next step with the new model name
