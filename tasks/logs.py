"""Logs (on demand, read-only): one log per host, the service's by default (`--data logs_source=build`,
download, watchdog; `--data logs_follow=true` follows). bin/rig logs is this.

The stage lives in vllm_rig/stages/logs/; this file is its entry."""

from vllm_rig.context import run_stage
from vllm_rig.stages.logs.deploy import show_logs

run_stage(show_logs)
