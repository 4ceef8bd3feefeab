"""vllm-rig: provision a dual RTX 2080 Ti box to serve a 27B FP8 model with the vLLM SM75 fork.

    pyinfra inventory.py deploy.py

Reads like a table of contents: one stage per file under tasks/, in order. Each stage file also
runs alone (`pyinfra inventory.py tasks/<stage>.py`). Settings are checked for every host first;
a bad value stops the run before anything touches a host.
"""

from pyinfra import local

from vllm_rig.context import stop_on_bad_settings

stop_on_bad_settings()

local.include("tasks/preflight.py")  # read-only checks; a failing host stops here
# Next, as their issues land: driver, cuda, model (start), runtime, model (finish), service, verify.
