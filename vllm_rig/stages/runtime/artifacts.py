"""Runtime artifacts on the deploy's side: the store on the control machine, one artifact per build
fingerprint (vllm_rig/host/runtime_artifact.py packs, installs and verifies them on the host).

Before the build: a host whose runtime is not built gets the fingerprint's artifact from the store, put into
<install_root>/cache/artifacts/ (manifest last); the build then installs it instead of compiling, or says in
one line why not and compiles. After the build: an artifact the host packed (it compiled) is fetched into the
store (archive first, manifest last: a manifest means a whole artifact), the host's copy removed, and the
store pruned to runtime_artifacts_keep.
"""

from __future__ import annotations

import os
import shlex
from io import BytesIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from vllm_rig.core.become import sudo_args
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime.facts import BuildState

REPO = Path(__file__).resolve().parents[3]


def store_dir(setting: str) -> Path:
    """The store's directory on the control machine; a relative setting is relative to the repository."""
    path = Path(setting).expanduser()
    return path if path.is_absolute() else REPO / path


def host_dir(cache: str) -> str:
    return f"{cache}/artifacts"


def build_part(cache: str, use: bool, pack: bool) -> dict[str, object]:
    """What the build spec says about artifacts (vllm_rig/host/runtime_build.py reads it)."""
    return {"dir": host_dir(cache), "use": use, "pack": pack}


@operation()
def artifact_offered(store: str, fingerprint: str, directory: str, runtime: str, unit: str, use: bool):
    """Put the fingerprint's artifact on a host whose runtime is not built, if the store has one."""
    found = host.get_fact(BuildState, runtime=runtime, unit=unit)
    if not use or found["complete"] or found["active"]:
        host.noop("no artifact needed" if use else "runtime artifacts are off or a rebuild is forced")
        return
    local = store_dir(store)
    manifest = local / runtime_artifact.manifest_name(fingerprint)
    if not manifest.is_file():
        host.noop(f"no runtime artifact for {fingerprint[:16]} in {local}: the host compiles")
        return
    archive = local / runtime_artifact.archive_name(fingerprint)
    d = shlex.quote(directory)
    yield f"mkdir -p {d} && rm -f {d}/*"  # only this fingerprint's files, never a stale half
    if archive.is_file():  # a store without it is partial: the host says so and compiles
        remote = f"{directory}/{archive.name}"
        yield FileUploadCommand(str(archive), remote, remote_temp_filename=host.get_temp_filename(remote))
    remote = f"{directory}/{manifest.name}"
    yield FileUploadCommand(BytesIO(manifest.read_bytes()), remote, remote_temp_filename=host.get_temp_filename(remote))


@operation()
def artifact_stored(store: str, fingerprint: str, directory: str, keep: int, enabled: bool):
    """Fetch the artifact the host packed after compiling into the store, then prune the store."""
    if not enabled:
        host.noop("runtime artifacts are off")
        return
    yield FunctionCommand(_fetch, (store, fingerprint, directory, keep), {})


def _fetch(state, host, store: str, fingerprint: str, directory: str, keep: int) -> bool:  # noqa: ARG001
    local = store_dir(store)
    remote_manifest = f"{directory}/{runtime_artifact.manifest_name(fingerprint)}"
    sudo = sudo_args(host)
    ok, _ = host.run_shell_command(f"test -f {shlex.quote(remote_manifest)}", **sudo)
    if not ok:
        return True  # nothing packed: the runtime was already built, or came from an artifact
    local.mkdir(parents=True, exist_ok=True)
    if not (local / runtime_artifact.manifest_name(fingerprint)).is_file():
        for name in (runtime_artifact.archive_name(fingerprint), runtime_artifact.manifest_name(fingerprint)):
            part = local / f"{name}.{host.name}.part"
            if not host.get_file(f"{directory}/{name}", str(part), **sudo):
                logger.warning(f"[{host.name}] could not fetch the runtime artifact's {name}; other hosts will compile")
                part.unlink(missing_ok=True)
                return True
            os.replace(part, local / name)
        logger.info(f"[{host.name}] runtime artifact {fingerprint[:16]} stored in {local}")
        removed = runtime_artifact.prune(local, keep)
        if removed:
            gone = ", ".join(f[:16] for f in removed)
            logger.info(f"[{host.name}] runtime artifacts removed (keeping {keep}): {gone}")
    host.run_shell_command(f"rm -f {shlex.quote(directory)}/{fingerprint}.*", **sudo)
    return True
