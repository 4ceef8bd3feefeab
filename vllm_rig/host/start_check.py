#!/usr/bin/env python3
"""Prove every start of the vLLM service: its unit's ExecStartPost (run as root, "+").

    python3 vllm-rig-host.pyz start_check --unit vllm.service --base-url http://127.0.0.1:8000 --model qwen-local
                   --env-file /etc/vllm-rig/vllm.env --timeout 840 --attempts 3
                   [--needle-words 6000] [--kv-shrink-share 0.2] [--log-file PATH]

The start is not done (systemd keeps the unit "activating") until service_probe's checks pass: /health,
warm-up, then the known answers. A server that exits meanwhile (systemd keeps the unit "activating (start-post)"
then too) is said at once with its last error line from the journal (server_gone.py), not after --timeout.
A failure exits 1: the start fails and Restart=always starts it again.
systemd counts those automatic restarts itself (NRestarts, reset by a start by hand); at the bound
(--attempts starts in a row) this prints ONE line naming the failing check and its answer, asks systemd to
stop the unit (an explicit stop is never restarted), and the service stays down until someone starts it.

The KV cache size the server logs ("GPU KV cache size: N tokens") is recorded after the first good start;
a later start more than --kv-shrink-share smaller fails once (one restart, GPU memory may still have been
held when the server profiled), then passes with a warning.

Writes START_CHECK_RESULT ({"time", "ok", "check", "detail", "boot_id"}) atomically. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from . import server_client, server_gone, service_probe

# Defaults only: the unit passes --result from vllm_rig/paths.py; the KV record lives beside it.
STATE_DIR = "/var/lib/vllm-rig"
RESULT = f"{STATE_DIR}/start-check.json"
KV_RECORD_NAME = "kv-cache.json"
# vLLM v1 kv_cache_utils: logger.info("GPU KV cache size: %s tokens", f"{num_tokens:,}")
KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def write_json(path: str, data: dict) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def read_json(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def result(ok: bool, check: str | None, detail: str) -> dict:
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"time": now, "ok": ok, "check": check, "detail": detail, "boot_id": boot_id()}


def systemctl(*args: str) -> str:
    run = subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)
    return run.stdout.strip()


def restarts(unit: str) -> int:
    """Automatic restarts since the unit was last started by hand (systemd's own counter)."""
    value = systemctl("show", "-p", "NRestarts", "--value", unit)
    return int(value) if value.isdigit() else 0


def kv_tokens(unit: str, log_file: str | None) -> int | None:
    """The KV cache size this start's server logged: from this invocation's journal, or the log file."""
    if log_file:
        try:
            text = Path(log_file).read_text(errors="replace")
        except OSError:
            return None
    else:
        invocation = os.environ.get("INVOCATION_ID", "")
        match = [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-b"]
        cmd = ["journalctl", "--no-pager", "-o", "cat", "-u", unit, *match]
        text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    found = KV_LINE.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def kv_verdict(
    tokens: int | None, share: float, attempt: int, say, record_path: str, key: str = ""
) -> tuple[bool, str]:
    """(ok, detail) for this start's KV cache size against the one recorded for the same server command
    (`key`); records the first good size of each command."""
    if tokens is None:
        return True, "no 'GPU KV cache size' line found; not compared"
    record = read_json(record_path)
    known = int(record.get("tokens") or 0) if record.get("key", "") == key else 0
    if not known or tokens >= known:
        write_json(record_path, {"tokens": tokens, "key": key, "boot_id": boot_id()})
        return True, f"KV cache {tokens:,} tokens recorded"
    if tokens >= known * (1 - share):
        return True, f"KV cache {tokens:,} tokens (recorded {known:,})"
    detail = f"KV cache {tokens:,} tokens, {100 * (1 - tokens / known):.0f}% below the recorded {known:,}"
    if attempt == 1:
        return False, detail + "; restarting once (GPU memory may not have been free yet)"
    say(f"WARNING: {detail} again after a restart; serving anyway (free the GPUs, then restart the service)")
    return True, detail


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unit", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--env-file")
    ap.add_argument("--timeout", type=float, default=840)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--needle-words", type=int, default=6000)
    ap.add_argument("--kv-shrink-share", type=float, default=0.2)
    ap.add_argument("--kv-key", default="", help="what the server runs (another one starts a new record)")
    ap.add_argument("--log-file")
    ap.add_argument("--result", default=RESULT)
    args = ap.parse_args(argv)

    def say(text: str) -> None:
        print(f"vllm-rig-start-check: {text}", flush=True)

    attempt = restarts(args.unit) + 1
    base, key = args.base_url.rstrip("/"), server_client.read_key(args.env_file)
    # systemd keeps the unit "activating (start-post)" while this runs, even after the server exited: ask it.
    gone = server_gone.watcher(args.unit, os.environ.get("MAINPID"))
    outcome = service_probe.prove(base, key, args.model, args.timeout, args.warmup, args.needle_words, say, gone)
    if outcome.ok:
        record = str(Path(args.result).with_name(KV_RECORD_NAME))
        tokens = kv_tokens(args.unit, args.log_file)
        ok, detail = kv_verdict(tokens, args.kv_shrink_share, attempt, say, record, args.kv_key)
        outcome = service_probe.Result("kv_cache", ok, detail)
        say(f"check kv_cache: {'ok' if ok else 'FAILED'}: {detail}")
    if outcome.ok:
        write_json(args.result, result(True, None, f"proven on start {attempt}: {', '.join(service_probe.CHECKS)}"))
        say(f"start {attempt} proven: warm-up and known answers passed")
        return 0
    write_json(args.result, result(False, outcome.check, outcome.detail))
    if outcome.check == "exited":
        # The server is gone: there is nothing to wait for. systemd restarts it (a CUDA error or memory still
        # held may pass), up to the bound; a flag it refuses fails the same way each time, in seconds.
        say(f"start {attempt} of {args.attempts} failed: {outcome.detail}")
        if attempt < args.attempts:
            return 1
        systemctl("stop", "--no-block", args.unit)
        say(f"giving up after {attempt} failed starts; {args.unit} stays stopped until started by hand or by a deploy")
        return 1
    if outcome.check == "kv_cache" or attempt < args.attempts:
        say(f"start {attempt} of {args.attempts} failed check {outcome.check}: {outcome.detail}; systemd restarts it")
        return 1
    say(
        f"giving up after {attempt} failed starts: check {outcome.check} failed: {outcome.detail}; "
        f"{args.unit} stays stopped until started by hand or by a deploy"
    )
    systemctl("stop", "--no-block", args.unit)  # an explicit stop: Restart= does not apply
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
