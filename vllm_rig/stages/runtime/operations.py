"""Operations of the runtime stage: build a runtime in a transient systemd unit and wait for it (or
re-attach), switch `current` atomically, prune old runtimes, clear JIT caches when the host changed, and
restart a service that runs stale code. The switch and the cache clearing record what they did in stamps
(vllm_rig/core/stamp.py), which the restart, FlashQLA's extension and the proofs read.

Each is decided by a fact read when it runs, so a second deploy changes nothing and a failed one heals.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from vllm_rig.core.checks import fail_host
from vllm_rig.core.stamp import ABSENT, stamps
from vllm_rig.core.stamp import commands as stamp_commands
from vllm_rig.core.systemd import said_on_failure
from vllm_rig.paths import FLASHQLA_STAMP, HOST_FINGERPRINT, SWITCHED_STAMP
from vllm_rig.stages.runtime import served_with
from vllm_rig.stages.runtime.artifacts import waits_for
from vllm_rig.stages.runtime.facts import (
    BuildState,
    LoadedHost,
    LogProgress,
    LogTail,
    RuntimeState,
    ServiceStart,
    built_state,
    restart_needed,
)

POLL_S = 3.0  # how often the deploy looks at a running build
GRACE_S = 120  # waiting past the unit's own RuntimeMaxSec before giving up on it


def _say(message: str) -> None:
    """Log when the operation runs, not while pyinfra plans it (an op body runs at both)."""
    if state.is_executing:
        logger.info(f"[{host.name}] {message}")


def start_command(unit: str, runtime: str, package: str, spec: str, log: str, timeout_s: int) -> str:
    """systemd-run for the build: a transient unit that outlives the SSH session, logs to `log`, and is
    stopped by systemd itself after timeout_s (RuntimeMaxSec)."""
    u, lg = shlex.quote(unit), shlex.quote(log)
    props = [
        f"--property=RuntimeMaxSec={int(timeout_s)}",
        f"--property=StandardOutput=append:{log}",
        f"--property=StandardError=append:{log}",
        "--property=Nice=5",  # the box stays responsive (and reachable) while every core compiles
    ]
    return (
        f"mkdir -p $(dirname {lg}) && {{ systemctl reset-failed {u} 2>/dev/null || true; }} && "
        f"systemd-run --quiet --unit={u} --description={shlex.quote('vllm-rig runtime build ' + runtime)} "
        f"--working-directory={shlex.quote(runtime)} --setenv=HOME=/root "
        + " ".join(shlex.quote(p) for p in props)
        + f" /usr/bin/python3 {shlex.quote(package)} build_runtime {shlex.quote(spec)}"
    )


@operation()
def build_runtime(
    runtime: str,
    unit: str,
    package: str,
    spec: str,
    spec_text: str,
    log: str,
    timeout_s: int,
    shared: str | None = None,
):
    """Build the runtime unless it is complete: write its spec (0600: index URLs may carry credentials)
    and start the build unit, or re-attach to the one running; then follow it with progress until it
    ends or timeout_s passes. A complete runtime keeps the spec it was built from. `shared`: the fingerprint,
    when this host may leave the compile to another host of this run and install its artifact later."""
    state = built_state(runtime, unit)
    if state["complete"]:
        host.noop(f"{runtime} is built")
        return
    if shared and (peer := waits_for(shared)):
        _say(f"{peer} compiles this fingerprint in this run; this host installs its artifact after")
        host.noop(f"waiting for {peer}'s artifact")
        return
    others = [u for u in state["others"] if u != unit]
    if others:
        yield FunctionCommand(fail_host, (f"another runtime build is running ({', '.join(others)}); wait for it",), {})
        return
    seen = host.get_fact(LogProgress, path=log, seen=0)["count"]  # lines of earlier attempts are not news
    if state["active"]:
        invocation = state["unit"].get("InvocationID")
        _say(f"re-attaching to the running build {unit} (invocation {invocation})")
    else:
        yield FileUploadCommand(BytesIO(spec_text.encode()), spec, remote_temp_filename=host.get_temp_filename(spec))
        yield f"chown root:root {shlex.quote(spec)} && chmod 600 {shlex.quote(spec)}"
        yield start_command(unit, runtime, package, spec, log, timeout_s)
    yield FunctionCommand(_follow, (runtime, unit, log, timeout_s, seen), {})


def _follow(state, host, runtime: str, unit: str, log: str, timeout_s: int, seen: int) -> bool:  # noqa: ARG001
    """Print the build's progress lines as they come; True when the runtime is complete."""
    deadline = time.monotonic() + timeout_s + GRACE_S
    logger.info(f"[{host.name}] building {runtime} in {unit}; log: {log}")
    last_shown = ""
    while True:
        progress = host.get_fact(LogProgress, path=log, seen=seen)
        seen = max(seen, progress["count"])
        for line in _worth_showing(progress["lines"], last_shown):
            logger.info(f"[{host.name}] build: {line}")
            last_shown = line
        found = host.get_fact(BuildState, runtime=runtime, unit=unit)
        if not found["active"]:
            return _verdict(host, found, runtime, unit, log)
        if time.monotonic() > deadline:
            logger.error(
                f"[{host.name}] the build is still running after {timeout_s}s (build_timeout_s); it goes on on "
                f"the host: re-run the deploy to re-attach, or `systemctl stop {unit}`; log: {log}"
            )
            return False
        time.sleep(POLL_S)


def _worth_showing(lines: list[str], last: str) -> list[str]:
    """In order: every step line, and of each run of [n/m] compile lines only its newest (the output stays
    short however fast the build goes)."""
    lines = [line.strip() for line in lines if line.strip()]
    shown = []
    for i, line in enumerate(lines):
        is_count = line.startswith("[")
        next_is_count = i + 1 < len(lines) and lines[i + 1].startswith("[")
        if is_count and (next_is_count or line == last):
            continue
        shown.append(line)
    return shown


def _verdict(host, found: dict, runtime: str, unit: str, log: str) -> bool:
    if found["complete"]:
        logger.info(f"[{host.name}] built {runtime}")
        return True
    result = found["unit"].get("Result") or "unknown"
    if result == "timeout":
        error = "the build ran longer than build_timeout_s and systemd stopped it (raise build_timeout_s)"
    else:
        error = found["status"].get("error") or f"the build unit ended without finishing ({result})"
    tail = host.get_fact(LogTail, path=log, count=25)
    logger.error(f"[{host.name}] runtime build failed: {error}\n  last lines of {log}:\n    " + "\n    ".join(tail))
    logger.error(f"[{host.name}] `current` is unchanged; fix the cause and re-run the deploy (it resumes)")
    return False


# Own operation: pyinfra's files.link replaces a link in two steps (rm, then ln); the switch is one rename.
@operation()
def switch_runtime(root: str, target: str, flashinfer_cache: str, unit_path: str, environment_file: str):
    """Point `current` at runtimes/<target> (atomic rename of a new symlink) and keep the old one as
    `previous`, first saving the unit and environment file the old one served with (a rollback to it puts them
    back: served_with.py); clear FlashInfer's JIT cache (its headers came with the runtime) and record the target
    in the switch stamp (also when an earlier run moved the link but was cut before the stamp). Then delete the
    runtimes that are neither (superseded or failed builds) unless their build still runs; their logs stay."""
    state = host.get_fact(RuntimeState, root=root)
    current, previous = state["current"], state["previous"]
    path = f"{root}/runtimes/{target}"
    r = shlex.quote(root)
    steps = []
    if current != target:
        _say(f"switching current: {current or '(none)'} -> {target}")
        if current:
            steps.append(served_with.save_command(unit_path, environment_file, shlex.quote(current)))
        steps.append(f"ln -sfn {shlex.quote(path)} {r}/.current.new && mv -T {r}/.current.new {r}/current")
        if current and current in state["runtimes"]:
            old = shlex.quote(f"{root}/runtimes/{current}")
            steps.append(f"ln -sfn {old} {r}/.previous.new && mv -T {r}/.previous.new {r}/previous")
            previous = current
    if steps or stamps().get(SWITCHED_STAMP, ABSENT).key != path:
        steps.append(f"rm -rf {shlex.quote(flashinfer_cache)}")
        yield from stamp_commands(" && ".join(steps), SWITCHED_STAMP, path)
    keep = {target, previous}
    doomed = sorted(n for n, info in state["runtimes"].items() if n not in keep and not info["building"])
    if doomed:
        _say(f"removing old runtimes: {', '.join(doomed)}")
        yield "rm -rf " + " ".join(shlex.quote(f"{root}/runtimes/{n}") for n in doomed)
        yield served_with.forget_command(doomed)
    elif not steps:
        host.noop(f"current is {target}; no old runtimes")


@operation()
def clear_host_caches(caches: Sequence[str]):
    """When the kernel or the driver is not what the JIT caches were made with, delete those caches (no
    recompile of the runtime) and the FlashQLA stamp (its extension was among them), then record the new
    host fingerprint. `caches`: shell words, globs allowed (vLLM's P2P cache files are left to the shell)."""
    now = host.get_fact(LoadedHost)
    recorded = stamps().get(HOST_FINGERPRINT, ABSENT).key
    if recorded == now:
        host.noop(f"host unchanged ({now})")
        return
    _say(f"host changed ({recorded or 'first run'} -> {now}): clearing JIT caches")
    command = "rm -rf " + " ".join(caches) + f" && rm -f {shlex.quote(FLASHQLA_STAMP)}"
    yield from stamp_commands(command, HOST_FINGERPRINT, now)


# Own operation: systemd.service(restarted=True) restarts on a change made in this run only; a run cut between
# the switch and the restart would leave the old runtime serving. Here the unit's start time is compared.
@operation()
def restart_if_stale(service: str, stamps_loaded: Sequence[str], when_it_fails: str | None = None):
    """`systemctl try-restart` when the service started before the newest of `stamps_loaded` was written
    (the runtime switched, the caches cleared), also after a deploy that was cut between the switch and the
    restart. A service the GPU verdict restarted after the change is not restarted again."""
    found = host.get_fact(ServiceStart, service=service)
    times = [stamps().get(s, ABSENT).mtime for s in stamps_loaded]
    changed = max((t for t in times if t is not None), default=None)
    if not restart_needed(found, changed):
        host.noop(f"{service} is {found['state']}; nothing newer to load")
        return
    yield said_on_failure(f"systemctl try-restart {shlex.quote(service + '.service')}", when_it_fails)
