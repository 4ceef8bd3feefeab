#!/usr/bin/env python3
"""One round of the vLLM watchdog: run by vllm-rig-watchdog.service from its timer, as root.

    python3 vllm-rig-host.pyz watchdog --unit vllm.service --base-url http://127.0.0.1:8000 --model qwen-local
                --env-file /etc/vllm-rig/vllm.env --failures 3 --max-restarts 2 --timeout 120

/health answers 200 while a wedged engine (after an Xid fault, say) fails every completion, so each round
asks a real question: service_probe's arithmetic check, a short completion with a known answer. After
--failures failed rounds in a row it restarts the service (the restart is proven by the start check); after
--max-restarts restarts that did not bring a passing round it stops restarting and says so in one line.
It also reads the kernel log since its last round for NVIDIA GPU events (Xid events, and the lines without
one: a GPU fallen off the bus, RmInitAdapter failed, the probe failed) and names them in one line.
A service that is not active (starting, or stopped by the start check) is not probed.

Writes WATCHDOG_RESULT ({"time", "ok", "check", "detail", "boot_id", "failures_in_row"}) atomically;
its private counters live beside it (watchdog-state.json). Stdlib only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from . import nvrm, server_client, service_probe
from .start_check import STATE_DIR, boot_id, read_json, result, write_json

RESULT = f"{STATE_DIR}/watchdog.json"  # a default: the unit passes --result from vllm_rig/paths.py


def kernel_log(since: float | None) -> str:
    """The kernel's messages since the last round (this boot's when there was none in this boot)."""
    cmd = ["journalctl", "-k", "--no-pager", "-o", "cat"]
    cmd += [f"--since=@{int(since)}"] if since else ["-b"]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return run.stdout


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--env-file")
    ap.add_argument("--failures", type=int, default=3)
    ap.add_argument("--max-restarts", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--result", default=RESULT)
    ap.add_argument("--state", help="its counters; default: watchdog-state.json beside --result")
    args = ap.parse_args(argv)

    def say(text: str) -> None:
        print(f"vllm-rig-watchdog: {text}", flush=True)

    args.state = args.state or str(Path(args.result).with_name("watchdog-state.json"))
    state = read_json(args.state)
    if state.get("boot_id") != boot_id():
        state = {"boot_id": boot_id()}
    failures, restarts = int(state.get("failures_in_row", 0)), int(state.get("restarts_in_row", 0))
    now = time.time()

    gpu_events = nvrm.describe(kernel_log(state.get("kernel_since")))
    state["kernel_since"] = now
    if gpu_events:
        say(f"NVIDIA GPU events in the kernel log: {gpu_events}")

    active = subprocess.run(["systemctl", "is-active", args.unit], capture_output=True, text=True, check=False)
    if active.stdout.strip() != "active":
        outcome = service_probe.Result("service", False, f"{args.unit} is {active.stdout.strip()}; not probed")
        ok = None
    else:
        base, key = args.base_url.rstrip("/"), server_client.read_key(args.env_file)
        outcome = service_probe.check_arithmetic(base, key, args.model, timeout=args.timeout)
        ok = outcome.ok
    detail = outcome.detail + (f"; {gpu_events}" if gpu_events else "")

    if ok:
        failures = restarts = 0
    elif ok is False:
        failures += 1
        say(f"round failed ({failures} in a row): check {outcome.check}: {outcome.detail}")
        if failures >= args.failures:
            if restarts < args.max_restarts:
                restarts += 1
                failures = 0
                say(
                    f"restarting {args.unit} (restart {restarts} of {args.max_restarts}) "
                    f"after {args.failures} failed rounds"
                )
                subprocess.run(["systemctl", "restart", "--no-block", args.unit], check=False)
            elif restarts == args.max_restarts:
                restarts += 1  # said once; later rounds keep counting failures quietly
                say(
                    f"giving up: {args.max_restarts} restarts did not help; check {outcome.check} "
                    f"failed: {outcome.detail}; {args.unit} is left as it is"
                )
    record = result(bool(ok), None if ok else outcome.check, detail)
    record["failures_in_row"] = failures
    write_json(args.result, record)
    state.update({"failures_in_row": failures, "restarts_in_row": restarts})
    write_json(args.state, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
