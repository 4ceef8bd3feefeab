"""The model download as a transient systemd unit: started early, waited for later, re-attached on a re-run.

vllm_rig/host/model_fetch.py does the work on the host (huggingface_hub's snapshot_download into its cache
beside model_dir, its checksum test of every file, marker, symlink switch). These operations decide from the
host's state (ModelFetch) whether to start it, and wait for it with progress lines; the library's return is
never trusted, only `model_fetch.py check`.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from vllm_rig.core.become import sudo_args
from vllm_rig.core.facts import kept_once
from vllm_rig.core.heartbeat import elapsed
from vllm_rig.core.secrets import PrivateFile, Secret, SecretStdin
from vllm_rig.host.units import human
from vllm_rig.paths import (
    HF_HOME,
    HF_TOKEN_FILE,
    MODEL_FETCH_STATUS,
    MODEL_FETCH_UNIT,
    MODEL_PEER_TOKEN_FILE,
    MODEL_SERVE_UNIT,
    Layout,
)
from vllm_rig.settings import Settings
from vllm_rig.stages.model.facts import FetchState, ModelFetch, ServedModels

RUNNING = ("active", "activating", "reloading")
PROGRESS_EVERY_S = 20.0  # polled every POLL_S: a line before the heartbeat's 25 s of quiet would add its own
POLL_S = 2.0


@dataclass(frozen=True)
class FetchSpec:
    """Everything the unit and the checks need, from the settings; no secret in here."""

    repo: str
    revision: str
    dest: str
    endpoint: str
    disable_xet: bool
    python: str
    package: str  # the host programs' zip: model_fetch.py runs from it
    timeout_s: int
    unit: str = MODEL_FETCH_UNIT
    status_file: str = MODEL_FETCH_STATUS
    token_file: str = HF_TOKEN_FILE
    hf_home: str = HF_HOME
    peer: str | None = None  # NAME=URL of the host this one fetches from in this run (stages/model/peers.py)
    peer_wait_s: int = 0
    peer_token_file: str = MODEL_PEER_TOKEN_FILE
    verify_endpoint: str | None = None  # hf_verify_endpoint: a second endpoint whose hashes must match

    @classmethod
    def of(cls, s: Settings) -> FetchSpec:
        layout = Layout.of(s)
        return cls(
            repo=s.model_repo,
            revision=s.model_revision,
            dest=s.model_dir,
            endpoint=s.hf_endpoint,
            disable_xet=s.hf_disable_xet,
            python=layout.tools_python,
            package=layout.host_package,
            timeout_s=s.download_timeout_s,
            verify_endpoint=s.hf_verify_endpoint,
        )

    @property
    def name(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def description(self) -> str:
        """The unit's Description: a running unit for another model or directory is not re-attached to."""
        return f"vllm-rig model fetch {self.name} into {self.dest}"

    def fact_args(self) -> dict[str, str]:
        return {
            "unit": self.unit,
            "python": self.python,
            "package": self.package,
            "repo": self.repo,
            "revision": self.revision,
            "dest": self.dest,
            "status_file": self.status_file,
        }

    def fetch_argv(self) -> list[str]:
        argv = [self.python, self.package, "model_fetch", "fetch", "--repo", self.repo, "--revision", self.revision]
        argv += ["--dest", self.dest, "--endpoint", self.endpoint, "--status-file", self.status_file]
        if self.peer:
            argv += ["--peer", self.peer, "--peer-wait-s", str(self.peer_wait_s)]
        if self.verify_endpoint:
            argv += ["--verify-endpoint", self.verify_endpoint]
        return argv + (["--disable-xet"] if self.disable_xet else [])

    def start_command(self) -> str:
        """systemd-run: the unit outlives the SSH session; the token comes from its 0600 file (the leading `-`
        makes it optional: without one, model_fetch.py switches implicit tokens off)."""
        props = [
            f"RuntimeMaxSec={self.timeout_s}",
            f"EnvironmentFile=-{self.token_file}",
            *([f"EnvironmentFile={self.peer_token_file}"] if self.peer else []),
            f"Environment=HF_HOME={self.hf_home}",
            "Nice=10",  # the runtime build in parallel comes first
            "SyslogIdentifier=vllm-rig-model-fetch",
            "TimeoutStopSec=30",
        ]
        run = ["systemd-run", f"--unit={self.unit}", f"--description={self.description}", "--collect", "--quiet"]
        run += [f"--property={p}" for p in props]
        q = shlex.quote
        return (
            f"systemctl reset-failed {q(self.unit)} 2>/dev/null; rm -f {q(self.status_file)} && "
            f"{shlex.join(run)} {shlex.join(self.fetch_argv())}"
        )


def is_running(state: FetchState) -> bool:
    return state["active"] in RUNNING


def progress_line(status: dict[str, Any] | None, rate: float | None = None) -> str:
    """`downloading 1.2 GiB of 29.0 GiB (4%), 3/15 files, 11.0 MiB/s, about 42m17s left` from the fetch's
    status file (the time left at the rate since the last line)."""
    if not status:
        return "starting"
    line = str(status.get("phase") or "starting")
    done, total = status.get("bytes_done") or 0, status.get("bytes_total")
    if total:
        line += f" {human(done)} of {human(total)} ({100 * done / total:.0f}%)"
        line += f", {status.get('files_done')}/{status.get('files_total')} files"
    if rate:
        line += f", {human(rate)}/s"
        if total and total > done:
            line += f", about {elapsed((total - done) / rate)} left"
    return line


def failure_line(state: dict[str, Any], spec: FetchSpec) -> str:
    """Why the model is not there, in the fetch's own words where it left any."""
    status = state["status"] or {}
    phase, message = status.get("phase"), status.get("message") or ""
    if status and status.get("exit_code") is None:
        return "the download stopped without a verdict (killed?); run the deploy again to continue"
    if phase == "stopped":
        why = f"download_timeout_s={spec.timeout_s} reached, or systemctl stop"
        return f"the download was stopped ({why}); run the deploy again to continue"
    if message and phase == "failed":
        return message
    return state["check"] or "no download has run"


def fetch_state(spec: FetchSpec) -> FetchState:
    """The host's ModelFetch for `spec`, read once per run when complete (model start, resume and finish each ask;
    nothing in a run takes a complete model away: models_keep runs last and keeps the one served)."""
    return kept_once(ModelFetch, lambda found: found["check_rc"] == 0 and not is_running(found), **spec.fact_args())


@operation()
def model_fetch_started(spec: FetchSpec):
    """Start the download unless the marker says complete or it is already running (then re-attach)."""
    state = fetch_state(spec)
    if is_running(state) and state["description"] == spec.description:
        host.noop(f"download of {spec.name} running since {state['since']}: re-attached")
        return
    if state["check_rc"] == 0 and not is_running(state):
        host.noop(f"{spec.name} is complete in {spec.dest}")
        return
    if state["active"] not in ("inactive", "failed"):  # another model's download, or one stopping
        yield f"systemctl stop {shlex.quote(spec.unit)}"
    yield spec.start_command()


@operation()
def model_fetch_resumed(spec: FetchSpec):
    """Start again a download that stopped before it was complete (the driver's reboot ends every transient
    unit); nothing when it runs, is complete, or was never started here (no tools venv: model start has not
    run). The fetch keeps whole files and drops the cut one's part (model_fetch.py), so little is lost."""
    state = fetch_state(spec)
    if is_running(state):
        host.noop(f"download of {spec.name} running since {state['since']}")
        return
    if state["check_rc"] == 0:
        host.noop(f"{spec.name} is complete in {spec.dest}")
        return
    if state["check_rc"] is None:
        host.noop("no download to resume: the tools venv is not there (tasks/model_start.py has not run)")
        return
    logger.info(f"[{host.name}] model: {spec.name} stopped before it was complete; starting it again")
    yield spec.start_command()


@operation(is_idempotent=True)
def model_fetched(spec: FetchSpec, timeout_s: int):
    """Wait for the download with a progress line every so often, then trust only `model_fetch.py check`.
    Decided by the host's state when it runs (the start stage may have been run alone, long before)."""
    state = fetch_state(spec)
    if not is_running(state) and state["check_rc"] == 0:
        if spec.peer:  # fetched in this run, from a peer or not: its one line, even when done before the wait
            _Reporter(host.name).peer_line(state["status"])
        host.noop(f"{spec.name} complete: {state['check']}")
        return
    yield FunctionCommand(_wait_and_check, (spec, timeout_s), {})


def _wait_and_check(state, host, spec: FetchSpec, timeout_s: int) -> bool:  # noqa: ARG001 - pyinfra passes them
    deadline = time.monotonic() + timeout_s
    reporter = _Reporter(host.name)
    now = host.get_fact(ModelFetch, **spec.fact_args())
    while is_running(now):
        reporter.report(now["status"])
        reporter.peer_line(now["status"])
        if time.monotonic() > deadline:
            logger.error(
                f"[{host.name}] model: {spec.name} still downloading after {timeout_s}s; it goes on in the "
                f"background ({spec.unit}); run the deploy again to wait for it"
            )
            return False
        time.sleep(POLL_S)
        now = host.get_fact(ModelFetch, **spec.fact_args())
    reporter.peer_line(now["status"])
    if now["check_rc"] == 0:
        logger.info(f"[{host.name}] model: {now['check']}")
        return True
    why = failure_line(now, spec)
    logger.error(f"[{host.name}] model: {spec.name} not complete: {why} (journalctl -u {spec.unit})")
    return False


class _Reporter:
    """Progress lines for one wait: on every phase change, else every PROGRESS_EVERY_S, with the rate."""

    def __init__(self, host_name: str) -> None:
        self.host_name = host_name
        self.phase: str | None = None
        self.at = 0.0
        self.bytes = 0
        self.peer_said = False

    def peer_line(self, status: dict[str, Any] | None) -> None:
        """The fetch's one line about a model peer it could not use, once."""
        line = (status or {}).get("peer_unused")
        if line and not self.peer_said:
            logger.warning(f"[{self.host_name}] model: {line}")
            self.peer_said = True

    def report(self, status: dict[str, Any] | None) -> None:
        now, phase = time.monotonic(), (status or {}).get("phase")
        if phase == self.phase and now - self.at < PROGRESS_EVERY_S:
            return
        done = (status or {}).get("bytes_done") or 0
        rate = (done - self.bytes) / (now - self.at) if self.at and phase == self.phase and now > self.at else None
        logger.info(f"[{self.host_name}] model: {progress_line(status, rate)}")
        self.phase, self.at, self.bytes = phase, now, done


# Own operation: a secret; files.put would print it with --diff (see core.secrets.secret_file).
@operation()
def secret_env_file(path: str, variable: str, value: Secret):
    """`VARIABLE=value` in a root-owned 0600 file, or no file when there is no value. The value travels on
    stdin (never on a command line or in pyinfra's output) and is compared by its digest only."""
    secret = value.reveal()
    found = host.get_fact(PrivateFile, path=path)
    if not secret:
        if found is None:
            host.noop(f"no {variable} configured; {path} absent")
            return
        yield f"rm -f {shlex.quote(path)}"
        return
    content = f"{variable}={secret}\n"
    want = hashlib.sha256(content.encode()).hexdigest()
    if found is not None and found == {"mode": "600", "owner": "root:root", "sha256": want}:
        host.noop(f"{path} is in place")
        return
    q = shlex.quote(path)
    directory = shlex.quote(path.rsplit("/", 1)[0] or "/")
    script = (
        # The directory keeps the usual 755 (other stages' config lives there); only the file is private.
        f'mkdir -p {directory} && umask 077 && tmp=$(mktemp {q}.XXXXXX) && cat > "$tmp" && '
        f'chown root:root "$tmp" && chmod 600 "$tmp" && mv -f "$tmp" {q}'
    )
    yield StringCommand("sh", "-c", shlex.quote(script), _stdin=SecretStdin(content))


@dataclass(frozen=True)
class ServedModel:
    """The catalogue entry the settings serve, as the host's record of served models keeps it."""

    name: str
    repo: str
    revision: str
    dir: str

    @classmethod
    def of(cls, s: Settings) -> ServedModel:
        return cls(s.model, s.model_repo, s.model_revision, s.model_dir)

    def matches(self, entry: dict[str, Any]) -> bool:
        return all(entry.get(key) == value for key, value in vars(self).items())


def models_to_remove(served: ServedModel, record: list[dict[str, Any]], keep: int) -> list[str]:
    """Directories of recorded models beyond the `keep` served before this one (still on disk)."""
    older = [m for m in record if m.get("dir") != served.dir and m.get("present")]
    return [m["dir"] for m in older[keep:]]


@operation(is_idempotent=True)
def models_kept(served: ServedModel, keep: int, python: str, package: str, record: str, unit_file: str):
    """Record `served` as the model now served (first), keep `keep` models served before it, remove the older
    ones (model_catalogue.py prints each with the space freed; it never removes the one the service serves).
    `python`: the tools venv's (huggingface_hub removes the revisions from its cache)."""
    found = host.get_fact(ServedModels, package=package, record=record)
    if found is not None and found[:1] and served.matches(found[0]):
        doomed = models_to_remove(served, found, keep)
        if not doomed:
            kept = [m.get("name") or m["dir"] for m in found[1:] if m.get("present")]
            host.noop(f"{served.name} recorded as served; kept: {', '.join(kept) or 'no other model'}")
            return
    argv = [
        python,
        package,
        "model_catalogue",
        "served",
        "--record",
        record,
        "--name",
        served.name,
        "--repo",
        served.repo,
    ]
    argv += ["--revision", served.revision, "--dir", served.dir, "--keep", str(keep), "--unit-file", unit_file]
    yield FunctionCommand(_run_printed, (shlex.join(argv),), {})


def _run_printed(state, host, command: str) -> bool:  # noqa: ARG001 - pyinfra passes them
    ok, output = host.run_shell_command(StringCommand(command), **sudo_args(host))
    for line in output.stdout_lines + output.stderr_lines:
        logger.info(f"[{host.name}] {line}")
    return ok


@dataclass(frozen=True)
class ServeSpec:
    """model_serve.py on a host that serves its model to the other hosts of this run."""

    repo: str
    revision: str
    dest: str
    bind: str
    port: int
    package: str
    timeout_s: int  # RuntimeMaxSec: the server never outlives the run's downloads by much
    followers: tuple[str, ...] = ()  # the hosts it serves: each has a token of its own and says when it is done
    idle_exit_s: int = 120  # it stops when no follower asked for this long
    unit: str = MODEL_SERVE_UNIT
    status_file: str = MODEL_FETCH_STATUS
    token_file: str = MODEL_PEER_TOKEN_FILE

    def start_command(self, again: bool = False) -> str:
        argv = ["python3", self.package, "model_serve", "--dest", self.dest, "--repo", self.repo]
        argv += ["--revision", self.revision, "--bind", self.bind, "--port", str(self.port)]
        argv += ["--status-file", self.status_file, "--followers", ",".join(self.followers)]
        argv += ["--idle-exit-s", str(self.idle_exit_s)]
        props = [f"RuntimeMaxSec={self.timeout_s}", f"EnvironmentFile={self.token_file}"]
        props += ["SyslogIdentifier=vllm-rig-model-serve", "TimeoutStopSec=10"]
        # Unprivileged, the system read-only: the server only reads the model and the fetch's status (the
        # token comes in through EnvironmentFile=, which systemd reads as root). DynamicUser: the model stage
        # runs before the service user exists.
        props += ["DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes"]
        props += ["NoNewPrivileges=yes", "CapabilityBoundingSet=", "RestrictSUIDSGID=yes"]
        run = ["systemd-run", f"--unit={self.unit}", "--description=vllm-rig model peer", "--collect", "--quiet"]
        run += [f"--property={p}" for p in props]
        q = shlex.quote(self.unit)
        start = f"systemctl reset-failed {q} 2>/dev/null; {shlex.join(run + argv)}"
        if again:  # this run's server: leave it if it still runs (a follower may be downloading)
            return f"systemctl -q is-active {q} || {{ {start}; }}"
        # A server left by an interrupted run holds that run's token: always start a fresh one.
        return f"systemctl stop {q} 2>/dev/null; {start}"


@operation()
def model_served(spec: ServeSpec, again: bool = False):
    """Serve the model to this run's followers (it answers "not yet" while this host's own download runs)."""
    yield spec.start_command(again)


@operation()
def model_peering_ended(unit: str | None, token_file: str):
    """After the run's downloads: the peer server stopped and the run's token gone, on both sides."""
    if unit is not None:
        q = shlex.quote(unit)
        yield f"systemctl stop {q} 2>/dev/null; systemctl reset-failed {q} 2>/dev/null; true"
    yield f"rm -f {shlex.quote(token_file)}"
