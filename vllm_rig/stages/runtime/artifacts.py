"""Runtime artifacts on the deploy's side: moving one fingerprint's artifact between a host and the store
(vllm_rig/stages/runtime/artifact_store.py), and sharing one compile between the hosts of one run
(vllm_rig/host/runtime_artifact.py packs, installs and verifies them on the host).

Before the build: a host whose runtime is not built gets the fingerprint's artifact from the store, put into
<install_root>/cache/artifacts/ (manifest last); the build then installs it instead of compiling, or says in
one line why not and compiles. After the build: an artifact the host packed (it compiled) goes into the
store (archive first, manifest last: a manifest means a whole artifact), the host's copy is removed, and the
store is pruned to runtime_artifacts_keep. The control machine signs each manifest it stores and offers a
host only a manifest its key signed and its record names as the last stored (artifact_signing.py): the store
alone cannot vouch for an archive, nor put back one a rebuild replaced.

One run, several hosts of one fingerprint and no artifact yet: pyinfra runs each operation on every host
before the next, so the first of them in inventory order compiles while the others skip that build; its
artifact is stored by the operation after the build, then offered to them and installed by a second build
operation. If the first host's build fails, the others compile themselves, with one line saying so. pyinfra
plans hosts in parallel, so who compiles is decided when the first build operation runs, not at planning.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from io import BytesIO
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation

from vllm_rig.core.become import sudo_args
from vllm_rig.host import runtime_artifact
from vllm_rig.stages.runtime import artifact_signing
from vllm_rig.stages.runtime.artifact_store import StoreSetting, local_dir, open_store
from vllm_rig.stages.runtime.facts import BuildState, built_state
from vllm_rig.stages.runtime.store import Store, StoreError

# fingerprint -> the hosts of this run that plan to build it with no artifact stored; and, once the first
# build operation runs, the one of them that compiles.
_CANDIDATES: dict[str, set[str]] = {}
_COMPILER: dict[str, str | None] = {}
_SAID_UNVOUCHED: set[tuple[str, str]] = set()
_SAID_PLAIN_HTTP: set[str] = set()


def warn_plain_http(store: StoreSetting) -> None:
    """An http:// store runs only with runtime_artifact_store_allow_http (settings.py refuses it otherwise);
    every run that uses one says so, once."""
    if store.location.startswith("http://") and store.location not in _SAID_PLAIN_HTTP:
        _SAID_PLAIN_HTTP.add(store.location)
        logger.warning(
            f"runtime artifact store {store.location} is plain http:// (runtime_artifact_store_allow_http): "
            "its password crosses the network in clear; the signature still guards what hosts install"
        )


def host_dir(cache: str) -> str:
    return f"{cache}/artifacts"


def build_part(cache: str, use: bool, pack: bool) -> dict[str, object]:
    """What the build spec says about artifacts (vllm_rig/host/runtime_build.py reads it)."""
    return {"dir": host_dir(cache), "use": use, "pack": pack}


def shares_a_compile(fingerprint: str, runtime: str, unit: str, use: bool, store: StoreSetting) -> bool:
    """At planning: this host needs the fingerprint built, may use artifacts and finds none stored; it is
    then one of the run's candidates, one of which compiles (see `compiler`)."""
    if not use:
        return False
    found = host.get_fact(BuildState, runtime=runtime, unit=unit)
    if found["complete"] or found["active"] or _has(store, open_store(store), fingerprint):
        return False
    _CANDIDATES.setdefault(fingerprint, set()).add(host.name)
    return True


def compiler(fingerprint: str) -> str | None:
    """When the operations run (planning, host by host in parallel, is over): the candidate that compiles,
    the first in inventory order still in the run; the same answer for the rest of the run. None while
    planning (every candidate plans a build) or when this fingerprint has no candidates."""
    if not state.is_executing or fingerprint not in _CANDIDATES:
        return None
    if fingerprint not in _COMPILER:
        names = _CANDIDATES[fingerprint]
        alive = [h.name for h in state.inventory if h.name in names and h not in state.failed_hosts]
        _COMPILER[fingerprint] = alive[0] if alive else None
    return _COMPILER[fingerprint]


def waits_for(fingerprint: str) -> str | None:
    """The other host of this run whose compile this host installs, if any."""
    who = compiler(fingerprint)
    return who if who and who != host.name else None


def _has(setting: StoreSetting, store: Store, fingerprint: str) -> bool:
    try:
        return _vouched(setting, store, fingerprint) is not None
    except StoreError as err:
        logger.warning(f"[{host.name}] {err}; this host compiles")
        return False


def _vouched(setting: StoreSetting, store: Store, fingerprint: str) -> bytes | None:
    """The stored manifest, if this control machine's key signed it and it is the artifact this control machine
    stored last for the fingerprint (artifact_signing.py); None when there is none, or one that is not (said
    once per host and fingerprint: the host then compiles and its artifact, signed and recorded, replaces the
    refused one). StoreError when the store cannot answer."""
    data = store.manifest(fingerprint)
    if data is None:
        return None
    key_path = local_dir(setting.key)
    try:
        manifest = artifact_signing.verify(data, artifact_signing.load_key(key_path))
        artifact_signing.check_current(manifest, fingerprint, key_path)  # the last stored, not a replayed one
    except artifact_signing.UnvouchedError as err:
        if (host.name, fingerprint) not in _SAID_UNVOUCHED:
            _SAID_UNVOUCHED.add((host.name, fingerprint))
            logger.warning(
                f"[{host.name}] runtime artifact {fingerprint[:16]} in {store.describe()} not used: {err}; "
                "this host compiles"
            )
        return None
    return data


@operation()
def artifact_offered(
    store: StoreSetting,
    fingerprint: str,
    directory: str,
    runtime: str,
    unit: str,
    use: bool,
    after_peer: bool = False,
):
    """Put the fingerprint's artifact on a host whose runtime is not built, if the store has one.
    `after_peer`: the offer after another host of this run compiled it (only a host that waited takes it)."""
    found = built_state(runtime, unit)
    compiled_by = waits_for(fingerprint) if after_peer else None
    if not use or found["complete"] or found["active"] or (after_peer and not compiled_by):
        host.noop("no artifact needed" if use else "runtime artifacts are off or a rebuild is forced")
        return
    chosen = open_store(store)
    if not _has(store, chosen, fingerprint):
        if compiled_by:
            logger.warning(
                f"[{host.name}] {compiled_by} left no artifact of {fingerprint[:16]} (its build or upload failed): "
                "this host compiles"
            )
        host.noop(f"no runtime artifact for {fingerprint[:16]} in {chosen.describe()}: the host compiles")
        return
    d = shlex.quote(directory)
    yield f"mkdir -p {d} && rm -f {d}/*"  # only this fingerprint's files, never a stale half
    yield FunctionCommand(_upload, (store, fingerprint, directory), {})


def _upload(state, host, store: StoreSetting, fingerprint: str, directory: str) -> bool:  # noqa: ARG001
    """The archive, then the manifest; an archive the store cannot give is left out (the host then says the
    artifact is partial and compiles)."""
    chosen = open_store(store)
    try:
        manifest = _vouched(store, chosen, fingerprint)  # the bytes verified are the bytes the host gets
        archive = chosen.archive(fingerprint) if manifest is not None else None
    except StoreError as err:
        logger.warning(f"[{host.name}] {err}; this host compiles")
        return True
    sudo = sudo_args(host)
    if archive is not None:
        remote = f"{directory}/{runtime_artifact.archive_name(fingerprint)}"
        if not host.put_file(str(archive), remote, remote_temp_filename=host.get_temp_filename(remote), **sudo):
            logger.warning(f"[{host.name}] could not upload the runtime artifact; this host compiles")
            return True
    if manifest is not None:
        remote = f"{directory}/{runtime_artifact.manifest_name(fingerprint)}"
        host.put_file(BytesIO(manifest), remote, remote_temp_filename=host.get_temp_filename(remote), **sudo)
    return True


@operation()
def artifact_stored(store: StoreSetting, fingerprint: str, directory: str, keep: int, enabled: bool):
    """Fetch the artifact the host packed after compiling into the store, then prune the store."""
    if not enabled:
        host.noop("runtime artifacts are off")
        return
    yield FunctionCommand(_store, (store, fingerprint, directory, keep), {})


def _store(state, host, store: StoreSetting, fingerprint: str, directory: str, keep: int) -> bool:  # noqa: ARG001
    remote_manifest = f"{directory}/{runtime_artifact.manifest_name(fingerprint)}"
    sudo = sudo_args(host)
    ok, _ = host.run_shell_command(f"test -f {shlex.quote(remote_manifest)}", **sudo)
    if not ok:
        return True  # nothing packed: the runtime was already built, or came from an artifact
    # Packed means compiled: a stored artifact of this fingerprint, if any, was refused (corrupt, partial) or
    # not wanted (force_rebuild), so the fresh one replaces it rather than leaving every other host to compile.
    _fetch_and_put(host, open_store(store), fingerprint, directory, keep, local_dir(store.key))
    host.run_shell_command(f"rm -f {shlex.quote(directory)}/{fingerprint}.*", **sudo)
    return True


def _fetch_and_put(host, chosen: Store, fingerprint: str, directory: str, keep: int, key: Path) -> None:
    """Host -> control machine (a temporary directory) -> signed -> store; any failure is one warning."""
    sudo = sudo_args(host)
    names = (runtime_artifact.archive_name(fingerprint), runtime_artifact.manifest_name(fingerprint))
    with tempfile.TemporaryDirectory(prefix=".incoming-", dir=chosen.scratch()) as tmp:
        local = [Path(tmp) / name for name in names]
        for name, path in zip(names, local, strict=True):
            if not host.get_file(f"{directory}/{name}", str(path), **sudo):
                logger.warning(f"[{host.name}] could not fetch the runtime artifact's {name}; other hosts compile")
                return
        try:
            archive_sha256 = _sign(local[1], local[0].parent, key, fingerprint)
            chosen.put(fingerprint, *local)
            artifact_signing.remember(key, fingerprint, archive_sha256)  # from now on, only this one is offered
            removed = chosen.prune(keep)
        except (StoreError, runtime_artifact.ArtifactError, artifact_signing.UnvouchedError) as err:
            logger.warning(f"[{host.name}] {err}; other hosts compile")
            return
    logger.info(f"[{host.name}] runtime artifact {fingerprint[:16]} stored in {chosen.describe()}")
    if removed:
        gone = ", ".join(f[:16] for f in removed)
        logger.info(f"[{host.name}] runtime artifacts removed (keeping {keep}): {gone}")


def _sign(manifest_path: Path, directory: Path, key: Path, fingerprint: str) -> str:
    """Check the fetched archive against the manifest the host packed, then sign that manifest in place (only
    if it names `fingerprint`); returns the archive's sha256, which the record then holds."""
    manifest = json.loads(manifest_path.read_text())
    runtime_artifact.check_archive(directory, manifest)
    signed = artifact_signing.sign(manifest, artifact_signing.load_key(key), fingerprint)
    manifest_path.write_text(json.dumps(signed, indent=1, sort_keys=True) + "\n")
    return str(signed["archive_sha256"])
