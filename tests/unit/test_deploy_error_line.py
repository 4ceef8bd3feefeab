"""The one line the benchmarks exit with when a deploy fails (tests/e2e/deploys.py), picked from pyinfra logs
as real runs against the sandbox printed them."""

from __future__ import annotations

import pytest

from tests.e2e.deploys import DeployRun

START = """--> Loading config...
--> Loading inventory...
--> Connecting to hosts...
    No host key for [127.0.0.1]:2321 found in known_hosts
    [rig1] Connected

--> Preparing operation files...
    Loading: tasks/model_start.py
    [rig1] Ready: tasks/model_start.py
"""
MODEL = (
    START
    + """--> Beginning operation run...
--> Starting operation: Model (start) | Model fetcher
    [rig1] No changes
--> Starting operation: Model (finish) | Model repo@main downloaded and verified
    [rig1] model: resolving
    [rig1] model: repo@main not complete: needs 304.9 MiB more in /opt/vllm-rig/models, 20.0 MiB free
    [rig1] Error: executed 0 commands
--> Disconnecting from hosts...
--> pyinfra error: No hosts remaining!
"""
)
BUILD = (
    START
    + """--> Starting operation: Runtime | Build runtime 0123 (MAX_JOBS=2, TORCH_CUDA_ARCH_LIST=7.5)
    [rig1] building 0123 in vllm-rig-build-0123.service; log: /var/lib/vllm-rig/logs/build-0123.log
    [rig1] build: ==> step 6/7: compile
    [rig1] runtime build failed: step compile: compiling the fork failed (exit code 1)
  last lines of /var/lib/vllm-rig/logs/build-0123.log:
    csrc/standin_ops.c:9:30: error: expected expression before ';' token
    [rig1] `current` is unchanged; fix the cause and re-run the deploy (it resumes)
    [rig1] Error: executed 3 commands
"""
)
SETTINGS = (
    START.replace("    [rig1] Ready: tasks/model_start.py\n", "")
    + """    [rig1] settings: max_model_len='abc' is not allowed: must be an integer from 1024 to 262144

--> Disconnecting from hosts...
"""
)


@pytest.mark.parametrize(
    ("log", "line"),
    [
        (MODEL, "[rig1] model: repo@main not complete: needs 304.9 MiB more in /opt/vllm-rig/models, 20.0 MiB free"),
        (BUILD, "[rig1] runtime build failed: step compile: compiling the fork failed (exit code 1)"),
        (SETTINGS, "[rig1] settings: max_model_len='abc' is not allowed: must be an integer from 1024 to 262144"),
        ("", "pyinfra exited 1"),
        # A heartbeat after the host's own line says nothing of why (vllm_rig/core/heartbeat.py).
        (
            MODEL.replace(
                "20.0 MiB free\n", "20.0 MiB free\n    [rig1] Model (finish) | x: still running, 30s so far\n"
            ),
            "[rig1] model: repo@main not complete: needs 304.9 MiB more in /opt/vllm-rig/models, 20.0 MiB free",
        ),
    ],
)
def test_the_line_that_says_why(log: str, line: str) -> None:
    assert DeployRun(1, [], ["rig1"], log).error_line() == line
