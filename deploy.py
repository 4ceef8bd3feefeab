"""vllm-rig: provision a dual RTX 2080 Ti box to serve a 27B FP8 model with the vLLM SM75 fork.

    pyinfra inventory.py deploy.py

Reads like a table of contents: one stage per file under tasks/, in order. Each stage file also
runs alone (`pyinfra inventory.py tasks/<stage>.py`). Settings are checked for every host first;
a bad value stops the run before anything touches a host.
"""

from pyinfra import local

from vllm_rig.context import stop_on_bad_settings

stop_on_bad_settings()

# Stages, in order. Each lands with its issue: preflight, driver, cuda, model (start), runtime,
# model (finish), service, verify; bench runs on demand (tasks/bench.py).
for stage in ():
    local.include(f"tasks/{stage}.py")
