"""A stand-in for the runtime build, run between tasks/model_start.py and tasks/model_finish.py until the runtime
stage lands: one step on the host that takes VLLM_RIG_STANDIN_BUILD_S seconds (read on the control side)."""

import os

from pyinfra.api import deploy
from pyinfra.operations import server


@deploy("Stand-in build")
def standin_build() -> None:
    seconds = float(os.environ.get("VLLM_RIG_STANDIN_BUILD_S") or 0)
    server.shell(name=f"Stand-in build ({seconds:g}s)", commands=[f"sleep {seconds:g}"])


standin_build()
