"""Runtime: the venv with the pinned torch stack, the SM75 vLLM fork built at a pinned commit with
FlashInfer's SM75 fix and FlashQLA, named by its build fingerprint, checked, then switched in.

<install_root>/runtimes/<fingerprint>/ holds one runtime (venv/, src/vllm, src/flashqla, src/deps/);
`current` points at the one the service runs, `previous` at the last good one. A changed fingerprint
builds a new runtime beside the old; a failed build leaves `current` alone. The build runs on the host
as a transient systemd unit (log under /var/lib/vllm-rig/logs/): an SSH drop does not stop it and a
re-run re-attaches. A changed kernel or driver clears the JIT caches without a rebuild. The service
stage restarts a service that runs an older runtime or cleared caches (after the GPU verdict, which
stops it anyway: one restart, not two). Rollback: `sudo <install_root>/bin/vllm-rig-rollback`.
"""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import FileContents
from pyinfra.operations import files

from vllm_rig import paths
from vllm_rig.core.checks import require
from vllm_rig.core.files import config_files, rendered, shipped, text
from vllm_rig.core.git import GitSource, git_checkouts
from vllm_rig.core.host_package import host_programs
from vllm_rig.core.packages import distro_packages
from vllm_rig.core.run import host_failed
from vllm_rig.core.stamp import stamped
from vllm_rig.core.users import service_user
from vllm_rig.paths import STATE_DIR, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.preflight.host_state import host_state
from vllm_rig.stages.runtime import artifacts, kinds, served_with
from vllm_rig.stages.runtime import plan as runtime
from vllm_rig.stages.runtime.artifact_store import StoreSetting
from vllm_rig.stages.runtime.facts import RuntimeState
from vllm_rig.stages.runtime.operations import (
    build_runtime,
    clear_host_caches,
    switch_runtime,
)
from vllm_rig.stages.service.unit import environment

# What the fork's build and FlashQLA's extension need from the distribution (Python.h, a C/C++
# compiler, git for the sources, ccache so a re-run recompiles only what changed).
BUILD_PACKAGES = ("gcc", "g++", "make", "git", "ccache", "ca-certificates")
FLASHQLA_LOAD = "from flash_qla.ops.gated_delta_rule.legacy import sm_legacy; sm_legacy._load_ext()"


def build_packages(python_version: str) -> list[str]:
    return [*BUILD_PACKAGES, f"python{python_version}-dev", f"python{python_version}-venv"]


def jit_caches(layout: Layout) -> list[str]:
    """Shell words for the caches a new kernel or driver invalidates (the service user's)."""
    home = layout.service_home
    return [
        shlex.quote(f"{home}/.cache/flashinfer"),
        shlex.quote(f"{home}/.triton"),
        shlex.quote(layout.torch_extensions_dir) + "/*",
        shlex.quote(f"{home}/.cache/vllm/") + "gpu_p2p_access_cache*",
    ]


def flashqla_warm_command(s: Settings, layout: Layout, either_kind: bool = False) -> str:
    """Load FlashQLA's extension exactly as the service will: its user, its environment, through `current`.
    `either_kind`: for the rollback script, which may land on a runtime of the other kind (no src/vllm in an
    upstream one: the settings' working directory would be a shell "cd:" error); the one that is there."""
    env = " ".join(shlex.quote(f"{name}={value}") for name, value in environment(s, layout))
    cd = f"cd {shlex.quote(kinds.of(s).working_directory(layout))}"
    if either_kind:
        cd = f"{{ cd {shlex.quote(layout.fork_src)} 2>/dev/null || cd {shlex.quote(layout.current)}; }}"
    return (
        f"{cd} && runuser -u {shlex.quote(s.service_user)} -- "
        f"env -i {env} {shlex.quote(layout.python)} -c {shlex.quote(FLASHQLA_LOAD)}"
    )


ROLLBACK_TEMPLATE = "runtime/vllm-rig-rollback.sh.j2"


def rollback_context(s: Settings, layout: Layout, dirs: runtime.RuntimeDirs) -> dict[str, str]:
    """The rollback script's variables, each one shell word (the template splices them in bare)."""
    return {
        "script": shlex.quote(dirs.rollback_script),
        "root": shlex.quote(s.install_root),
        "service": shlex.quote(s.service_name),
        "flashinfer_cache": shlex.quote(f"{layout.service_home}/.cache/flashinfer"),
        "state_dir": shlex.quote(STATE_DIR),
        "switched_stamp": shlex.quote(paths.SWITCHED_STAMP),
        "flashqla_warm": flashqla_warm_command(s, layout, either_kind=True),
        "flashqla_stamp": shlex.quote(paths.FLASHQLA_STAMP),
        # The unit each runtime served with: saved for the one left, put back for the one returned to.
        "save_unit": served_with.save_command(layout.unit_path, layout.environment_file, '"$left"'),
        "restore_unit": served_with.restore_command(layout.unit_path, layout.environment_file, '"$back"'),
    }


@deploy("Runtime")
def install_runtime(s: Settings, retry_rolled_back: bool = False) -> None:
    """`retry_rolled_back`: tasks/update_fork.py trying a release a guarded update rolled back from before."""
    if host_failed():
        return
    layout = Layout.of(s)
    box = host_state(s.install_root)  # CPUs and RAM: the run does not change them
    if not box:
        return  # the host's state could not be read: preflight has already failed it
    inputs = runtime.build_inputs(s)
    fp = runtime.fingerprint(inputs)
    choice = runtime.choose(fp, host.get_fact(RuntimeState, root=s.install_root), s.force_rebuild, retry_rolled_back)
    dirs = runtime.RuntimeDirs(s.install_root, choice.name)
    jobs = runtime.max_jobs(s.build_max_jobs, box["cpus"], box["ram_gb"])
    user = s.service_user
    kind = kinds.of(s)

    distro_packages(
        name="Build tools and Python headers from the distribution", packages=build_packages(s.python_version)
    )
    service_user(layout, box["gpu_groups"])  # the build warms FlashQLA's extension as this user
    files.directory(name="Runtimes directory", path=dirs.runtimes, user="root", group="root", mode="755")
    files.directory(name="Runtime cache directory", path=dirs.cache, user="root", group="root", mode="755")
    files.directory(name="Log directory", path=paths.LOG_DIR, user="root", group="root", mode="755")
    files.directory(  # stable and writable: the service user compiles FlashQLA's extension into it
        name="The service user's torch extensions",
        path=layout.torch_extensions_dir,
        user=user,
        group=user,
        mode="755",
    )
    host_programs(layout.host_package)
    config_files(
        name="FlashInfer SM75 check (the service's ExecStartPre) and rollback script",
        files=(
            shipped(layout.flashinfer_check, "runtime/check-flashinfer-pr3621-sm75.sh", mode="755"),
            # Root only (it runs as root, and FlashQLA's warm-up in it carries the server's environment).
            rendered(dirs.rollback_script, ROLLBACK_TEMPLATE, mode="700", **rollback_context(s, layout, dirs)),
        ),
    )
    require(
        name="The runtime these settings build was not rolled back",
        problem=lambda: _rolled_back(s, inputs, choice),
    )
    config_files(name=f"Runtime {choice.name}", files=(text(dirs.fingerprint_file, fp + "\n"),))
    git_checkouts(
        name=kind.sources_label(s),
        sources=tuple(
            GitSource(label, url, ref, dest, f"{dirs.cache}/git/{runtime.cache_name(url)}.git")
            for label, url, ref, dest in runtime.git_sources(s, dirs)
        ),
    )
    use_artifact = s.runtime_artifacts and not s.force_rebuild
    spec = runtime.build_spec(s, dirs, fp, inputs, jobs)
    spec["artifact"] = artifacts.build_part(dirs.cache, use=use_artifact, pack=s.runtime_artifacts)
    adir = artifacts.host_dir(dirs.cache)
    artifact_store = StoreSetting.of(s)
    if s.runtime_artifacts:
        artifacts.warn_plain_http(artifact_store)
    spec_text = json.dumps(spec, indent=1, sort_keys=True) + "\n"

    def offer(name: str, use: bool, after_peer: bool = False) -> None:
        artifacts.artifact_offered(
            name=name,
            store=artifact_store,
            fingerprint=fp,
            directory=adir,
            runtime=dirs.dir,
            unit=dirs.unit,
            use=use,
            after_peer=after_peer,
        )

    def build(name: str, shared: str | None = None) -> None:
        build_runtime(
            name=name,
            runtime=dirs.dir,
            unit=dirs.unit,
            package=layout.host_package,
            spec=dirs.spec,
            spec_text=spec_text,
            log=dirs.log,
            timeout_s=s.build_timeout_s,
            shared=shared,
        )

    def store(name: str) -> None:
        artifacts.artifact_stored(
            name=name,
            store=artifact_store,
            fingerprint=fp,
            directory=adir,
            keep=s.runtime_artifacts_keep,
            enabled=s.runtime_artifacts,
        )

    shared = artifacts.shares_a_compile(fp, dirs.dir, dirs.unit, use_artifact, artifact_store)
    offer("Runtime artifact of this fingerprint from the store, when it has one", use_artifact)
    build(kind.build_label(s, choice.name, jobs), shared=fp if shared else None)
    store("Runtime artifact of a compiled runtime kept in the store")
    if shared:  # fresh hosts of one fingerprint in this run: one compiles, the others install its artifact
        offer(f"Runtime artifact {choice.name} another host of this run compiled", True, after_peer=True)
        build(f"Runtime {choice.name} installed from that artifact, checked")
        store("Runtime artifact kept in the store, had this host compiled after all")
    if retry_rolled_back:
        files.file(
            name=f"{choice.name} tried again: not marked rolled back", path=f"{dirs.dir}/rolled-back", present=False
        )
    switch_runtime(
        name=f"current -> {choice.name}, the one before kept as previous, older ones removed",
        root=s.install_root,
        target=choice.name,
        flashinfer_cache=f"{layout.service_home}/.cache/flashinfer",
        unit_path=layout.unit_path,
        environment_file=layout.environment_file,
    )
    clear_host_caches(name="JIT caches cleared when the kernel or driver changed", caches=jit_caches(layout))
    stamped(
        name="FlashQLA extension built for the current runtime",
        command=flashqla_warm_command(s, layout),
        stamp=paths.FLASHQLA_STAMP,
        key=dirs.dir,  # what `current` points at once switched; clearing the caches drops the stamp
    )


def _rolled_back(s: Settings, inputs: dict, choice: runtime.Choice) -> str | None:
    """The settings' runtime is one that was rolled back from (only a person's rollback makes it so, never an
    earlier operation of this run: the choice read when the stage was planned holds)."""
    if choice.action != "rolled-back":
        return None
    record = "\n".join(host.get_fact(FileContents, path=f"{s.install_root}/current/runtime.json") or [])
    try:
        running = json.loads(record or "{}").get("inputs", {})
    except ValueError:
        running = {}
    return runtime.rolled_back_problem(choice.name, s.install_root, runtime.input_differences(inputs, running))
