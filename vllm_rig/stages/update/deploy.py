"""Guarded fork update (on demand): a new fork commit (a newer release from tasks/fork_releases.py) is built
beside the running runtime, proven, benchmarked against it, and kept only when it is not slower.

    pyinfra inventory.py tasks/update_fork.py --data fork_ref=<commit of the release>

In order: the seed's benchmark on the runtime that serves now; the runtime stage for the new commit (built
beside, checked, switched; the old one stays as `previous`); the GPU verdict; the service restarted on it and
proven with a real completion; the same benchmark on it. When decode and prefill at every size are at most
fork_update_margin_pct percent below the old runtime's, the new one stays; otherwise the rollback script puts
the old one back (the new one is kept as `previous`, marked rolled back), the service is proven again, and the
comparison says why. Either way the comparison (bench's compare_table) is printed. Both GPUs hold one
server, so the new runtime is measured in the service's place: the service restarts twice when it is kept back.
Make a switch stick by setting fork_ref in the host's settings; trying the same commit again re-uses its build.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from typing import cast

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation
from pyinfra.operations import files

from vllm_rig.core.become import sudo_args
from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.core.stamp import streamed
from vllm_rig.host import bench as bench_tool
from vllm_rig.paths import SERVICE_PROVEN, STATE_DIR, Layout, RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.bench.command import bench_command
from vllm_rig.stages.model.start import ensure_tools_venv
from vllm_rig.stages.runtime import kinds
from vllm_rig.stages.runtime import plan as runtime
from vllm_rig.stages.runtime.deploy import install_runtime
from vllm_rig.stages.runtime.facts import RuntimeState
from vllm_rig.stages.service.deploy import install_service
from vllm_rig.stages.service.unit import render_unit
from vllm_rig.stages.update.guard import worse
from vllm_rig.stages.verify.deploy import verify_gpus

BEFORE = f"{STATE_DIR}/update-bench-running.json"
AFTER = f"{STATE_DIR}/update-bench-new.json"


def stage(deploy_function: object) -> Callable[..., object]:
    """A stage's @deploy function, called inside this one with its own arguments and pyinfra's global ones
    (`_ignore_errors`); pyinfra's types describe a @deploy function as an operation's, hence the cast."""
    return cast("Callable[..., object]", deploy_function)


def probe_command(s: Settings, layout: Layout) -> str:
    return shlex.join(
        ["python3", layout.host_package, "service_probe", "--base-url", f"http://127.0.0.1:{s.vllm_port}"]
        + ["--model", s.served_model_name, "--env-file", layout.env_file, "--timeout", str(s.service_start_timeout_s)]
        + ["--unit", f"{s.service_name}.service"]
    )


@deploy("Guarded fork update")
def update_fork(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    fp = runtime.fingerprint(runtime.build_inputs(s))
    state = host.get_fact(RuntimeState, root=s.install_root)
    running = state["current"]
    info = state["runtimes"].get(running) if running else None
    if info is not None and info["fingerprint"] == fp:
        logger.info(f"[{host.name}] update: runtime {running} already runs {kinds.of(s).label(s)}; nothing to try")
        return
    ensure_tools_venv(s)  # bench runs from it
    host_programs(layout.host_package)
    streamed(
        name=f"Benchmark the running runtime {running}: {s.bench_sizes}",
        command=bench_command(s, layout, f"running-{running}", BEFORE),
    )
    stage(install_runtime)(s, retry_rolled_back=True)  # a failed build stops here: `current` was never moved
    # From here the new runtime is on trial: a failed verdict, proof or benchmark does not stop the host, the
    # guard below sees no result for the new runtime and puts the old one back.
    files.file(name="No benchmark of a new runtime yet", path=AFTER, present=False)
    stage(verify_gpus)(s, _ignore_errors=True)
    stage(install_service)(s, _ignore_errors=True)
    streamed(
        name=f"Benchmark the new runtime ({kinds.of(s).label(s)}): {s.bench_sizes}",
        command=bench_command(s, layout, kinds.of(s).label(s).replace(" ", "-"), AFTER),
        _ignore_errors=True,
    )
    kept_if_not_slower(
        name=f"The new runtime stays only if decode and prefill are within {s.fork_update_margin_pct:g}%",
        margin_pct=s.fork_update_margin_pct,
        rollback=RuntimeDirs(s.install_root, "").rollback_script,
        probe=probe_command(s, layout),
        stamp=SERVICE_PROVEN,
        proof_fingerprint=hashlib.sha256(
            f"{render_unit(s, layout)}|driver {s.nvidia_driver_version}".encode()
        ).hexdigest(),
        root=s.install_root,
        fork_ref=s.fork_ref,
    )


@operation(is_idempotent=False)
def kept_if_not_slower(
    margin_pct: float, rollback: str, probe: str, stamp: str, proof_fingerprint: str, root: str, fork_ref: str
):
    """Keep the new runtime, or roll back to the old one (see update_fork); prints the comparison either way."""
    yield FunctionCommand(_decide, (margin_pct, rollback, probe, stamp, proof_fingerprint, root, fork_ref), {})


def _run(host, command: str, print_output: bool = False) -> tuple[bool, str]:
    ok, output = host.run_shell_command(StringCommand(command), print_output=print_output, **sudo_args(host))
    return ok, output.stdout


def _problems(host, margin_pct: float) -> tuple[list[str], bool]:
    """What keeps the new runtime out ([] when nothing), and whether both benchmarks were there to compare."""
    results = []
    for path in (BEFORE, AFTER):
        ok, text = _run(host, f"cat {shlex.quote(path)}")
        try:
            results.append(json.loads(text) if ok else None)
        except ValueError:
            results.append(None)
    before, after = results
    if before is None:
        return [f"the running runtime's benchmark is missing ({BEFORE})"], False
    if after is None:
        return ["it did not pass its GPU verdict, proof or benchmark (see above)"], False
    for line in bench_tool.compare_table(before, after).splitlines():
        logger.info(f"[{host.name}] {line}")
    return worse(before, after, margin_pct), True


def _decide(state, host, margin_pct, rollback, probe, stamp, proof_fingerprint, root, fork_ref) -> bool:  # noqa: ARG001
    try:
        problems, compared = _problems(host, margin_pct)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong here, the old runtime must serve again
        problems, compared = [f"the guard could not compare the two ({type(exc).__name__}: {exc})"], False
    _, new = _run(host, f"readlink {shlex.quote(root + '/current')}")
    if not problems:
        logger.info(
            f"[{host.name}] update: switched: {new.strip()} serves (not slower than the runtime before); set "
            f"fork_ref={fork_ref} in the host's settings to keep it on later deploys"
        )
        return True
    why = "is slower" if compared else "failed"
    logger.warning(f"[{host.name}] update: kept the running runtime: the new one {why}: {'; '.join(problems)}")
    ok, said = _run(host, shlex.quote(rollback), print_output=True)
    if not ok:
        logger.error(f"[{host.name}] update: the rollback to the old runtime failed: {said.strip()[-300:]}")
        return False
    ok, _ = _run(host, probe, print_output=True)
    if not ok:
        logger.error(f"[{host.name}] update: the old runtime did not prove itself again after the rollback")
        return False
    _, old = _run(host, f"readlink {shlex.quote(root + '/current')}")
    key = shlex.quote(f"{proof_fingerprint}:{old.strip()}")
    _run(host, f"printf '%s\\n' {key} > {shlex.quote(stamp)}")
    logger.warning(
        f"[{host.name}] update: {old.strip()} serves again; the new runtime is kept as previous, marked rolled back"
    )
    return True
