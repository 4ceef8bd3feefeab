"""`python3 vllm-rig-host.pyz <program> [args]`: run one host program of the package as its own script."""

from __future__ import annotations

import runpy
import sys

PROGRAMS = (
    "bench",
    "build_runtime",
    "fork_releases",
    "gpu_facts",
    "gpu_verdict",
    "gpu_wait",
    "lan_keys",
    "lan_tls",
    "model_catalogue",
    "model_fetch",
    "model_preflight",
    "model_serve",
    "server_gone",
    "service_probe",
    "start_check",
    "status_probe",
    "triage",
    "watchdog",
)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in PROGRAMS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(PROGRAMS)}}} [args]")
    program = sys.argv.pop(1)
    # runpy points sys.argv[0] at the module file: usage lines name the program (argparse prints its basename)
    runpy.run_module(f"vllm_rig.host.{program}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
