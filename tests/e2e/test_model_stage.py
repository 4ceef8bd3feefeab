"""Model stage on the sandbox: the checkpoint through the HF mirror stand-in with the real `hf` client, in a
transient unit that runs while something else takes its time, verified by sha256, resumable and re-attachable.

One machine, fresh at the start, goes through: an unknown repo, a down mirror and a small disk stopping
before any change; a first download and a no-op re-run; deploy.py through model finish on a new machine (the
download starts before any apt work, the driver's reboot cuts it, model resume goes on), then the download
overlapping a forced runtime build; a connection dropped mid-shard; a killed download; a deploy killed
mid-wait that the next run re-attaches to; a file corrupted in flight; a new revision beside the old; and a
token that shows up nowhere (own mirror, -vv).
"""

from __future__ import annotations

import base64
import json
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e import figures
from tests.e2e.deploys import DeployRun, deploy, fresh
from tests.e2e.model import (
    BIG_SHARD,
    ENDPOINT,
    MIB,
    MODEL_DIR,
    MODELS,
    REPO,
    SMALL_SHARD,
    STAGE,
    UNIT,
    blob_bytes,
    clear_log,
    commit,
    digests,
    every_content,
    fetched_contents,
    fetched_names,
    gets,
    host_digests,
    knobs,
    requests,
    reset_model,
    sh,
    snapshot_link,
    source,
    status,
    total,
    unit_active,
)
from tests.sandbox import paths
from tests.sandbox.fixtures import hf_mirror

pytestmark = pytest.mark.sandbox

WITH_PREFLIGHT = ("tasks/preflight.py", *STAGE)


# ---- the host ---------------------------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def journal(rig: Rig) -> str:
    return sh(rig, "journalctl --no-pager -o export")


# ---- deploys in the background ----------------------------------------------------------------------


@dataclass
class Background:
    proc: subprocess.Popen[str]

    def wait(self, timeout: float = 300) -> DeployRun:
        out, err = self.proc.communicate(timeout=timeout)
        results = (json.loads(out).get("results") or {}) if out.strip() else {}
        changed = [op["name"] for op in results.get("operations", []) if op.get("success")]
        return DeployRun(self.proc.returncode, changed, results.get("failed_hosts", []), err)


def start_deploy(rig: Rig, *files: str, data: dict[str, object] | None = None, flags: tuple[str, ...] = ()):
    """deploys.deploy(), started and not waited for; `flags` such as -vv go before the files."""
    args = [str(Path(sys.executable).with_name("pyinfra")), "-y", *flags]
    args += [str(rig.inventory.relative_to(paths.REPO)), *files, "--json"]
    for key, value in (data or {}).items():
        args += ["--data", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    proc = subprocess.Popen(args, cwd=paths.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Background(proc)


# ---- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def fresh_box(rig: Rig) -> Iterator[None]:
    fresh(rig, secure_boot=False)
    knobs()
    yield
    knobs()


# ---- stops before any change ------------------------------------------------------------------------


def _assert_nothing_changed(rig: Rig, run: DeployRun) -> str:
    assert not run.ok and run.changed == []
    assert sh(rig, "ls -d /opt/vllm-rig /var/lib/vllm-rig /etc/vllm-rig 2>/dev/null || true").strip() == ""
    assert unit_active(rig) == "inactive"
    assert gets() == []
    (line,) = [line for line in run.log.splitlines() if "preflight failed" in line]
    return line


def test_unknown_repo_stops_before_any_change(rig: Rig) -> None:
    clear_log()
    run = deploy(rig, *WITH_PREFLIGHT, data={"model_repo": "nobody/nothing"})
    line = _assert_nothing_changed(rig, run)
    assert f"nobody/nothing@main: repository not found at {ENDPOINT}" in line and "model_repo" in line


@pytest.mark.parametrize(
    ("down", "says"),
    [("refuse", f"{REPO}@main: could not reach {ENDPOINT}"), ("503", f"{REPO}@main: {ENDPOINT} answered HTTP 503")],
)
def test_down_mirror_stops_before_any_change(rig: Rig, down: str, says: str) -> None:
    knobs(down=down)
    clear_log()
    run = deploy(rig, *WITH_PREFLIGHT)
    knobs()
    line = _assert_nothing_changed(rig, run)
    assert says in line and "hf_endpoint" in line


def test_small_disk_stops_before_any_change(rig: Rig) -> None:
    sh(rig, "mkdir -p /mnt/small && mount -t tmpfs -o size=20m tmpfs /mnt/small")
    try:
        clear_log()
        run = deploy(rig, *WITH_PREFLIGHT, data={"model_dir": "/mnt/small/model"})
        line = _assert_nothing_changed(rig, run)
        assert f"{REPO}@{commit()[:12]}: needs" in line and "in /mnt/small" in line and "bigger disk" in line
    finally:
        sh(rig, "umount /mnt/small; rmdir /mnt/small")


# ---- the download -----------------------------------------------------------------------------------


def test_first_deploy_fetches_and_verifies_and_a_rerun_changes_nothing(rig: Rig) -> None:
    clear_log()
    run = deploy(rig, *WITH_PREFLIGHT)
    assert run.ok, run.log[-3000:]
    assert sh(rig, f"readlink {MODEL_DIR}").strip() == snapshot_link()
    assert host_digests(rig) == digests()
    assert fetched_contents() == every_content()  # every file once
    modes = sh(rig, f"stat -L -c '%U:%G %a' {MODEL_DIR}/ {MODEL_DIR}/*").split("\n")
    assert set(filter(None, modes)) == {"root:root 755", "root:root 644"}  # the service reads, cannot write
    assert status(rig)["phase"] == "done" and status(rig)["exit_code"] == 0
    assert "complete, commit" in run.log
    assert sh(rig, "test -e /etc/vllm-rig/hf-token.env && echo yes || echo no").strip() == "no"

    clear_log()
    started = time.monotonic()
    again = deploy(rig, *WITH_PREFLIGHT)
    elapsed = time.monotonic() - started
    assert again.ok and again.changed == [], again.log[-2000:]
    assert requests() == []  # the marker answers: not even preflight asks the mirror
    print(f"\nno-op re-run of preflight + model start + finish: {elapsed:.1f}s")


def _first_dpkg_install(rig: Rig, since: float) -> float:
    """Epoch seconds when dpkg first unpacked a package after `since`: the oldest of the file lists it
    writes per package (/var/lib/dpkg/info/*.list), by the host's clock, to the nanosecond."""
    out = sh(rig, f"find /var/lib/dpkg/info -name '*.list' -newermt @{since:.3f} -printf '%T@\\n'")
    return min(float(t) for t in out.split())


def test_fresh_box_download_starts_before_apt_and_goes_on_after_the_driver_reboot(rig: Rig) -> None:
    # deploy.py through model finish on a new machine: this also gives the next tests their driver, CUDA and a
    # first runtime (apt, git and pip warm, as on any box deployed before).
    o = figures.overlap_fresh(rig, download_s=40, build_s=10, secure_boot=False)
    print(
        f"\nfresh box: download runs {[(round(a, 1), round(b, 1)) for a, b in o.download_runs]}, build "
        f"{o.build_at[0]:.1f}..{o.build_at[1]:.1f} (s after the start), wall {o.wall:.1f}s; ratio {o.ratio:.2f}"
    )
    assert "rebooting: " in o.run.log  # the driver stage rebooted the box in the middle of the download
    assert "stopped before it was complete; starting it again" in o.run.log
    assert len(o.download_runs) == 2  # cut by the reboot, started again by model resume, nothing else
    # By the host's clocks: the download ran before dpkg changed anything (the driver's apt work).
    assert o.began + o.download_runs[0][0] < _first_dpkg_install(rig, o.began)
    # The guarantee is the order of deploy.py (model start, driver with its reboot, model resume, runtime), not
    # that the download outlasts a build of some speed: cut by the reboot before the build could start, and
    # started again after the reboot, before the build began (it may then end before or after the build).
    assert o.download_runs[0][1] < o.build_at[0]
    assert o.download_runs[0][1] <= o.download_runs[1][0] < o.build_at[0]
    # Nothing waits for the download until model finish, after the build (the deploy's own order): the build
    # overlaps it. How much is a figure of this machine's load (printed above), not a promise.
    log = o.run.log
    assert "build: ==> step 6/8: compile" in log  # a real build ran, not a resumed or kept runtime
    assert log.index("build: ==> step 6/8: compile") < log.index("--> Starting operation: Model (finish) | ")
    assert host_digests(rig) == digests()


def test_connection_dropped_mid_shard_refetches_at_most_10_mib(rig: Rig) -> None:
    cut = figures.refetch_after_cut(rig, 15_000_000)
    assert len(cut.shard_gets) == 2 and "dropped at 15000000" in cut.shard_gets[0]["events"]
    print(f"\nre-fetched after the drop: {cut.refetched / MIB:.2f} MiB")
    assert 0 < cut.refetched <= 10 * MIB
    assert cut.served - blob_bytes() == cut.refetched  # no other file was fetched twice
    assert host_digests(rig) == digests()


def _partial_state(rig: Rig) -> tuple[set[str], int]:
    """(whole files in the snapshot being fetched, bytes in the client's .incomplete blobs)."""
    staging = f"{MODELS}/{snapshot_link()}"
    out = sh(rig, f"cd {staging} 2>/dev/null && find -L . -maxdepth 1 -type f -printf '%f %s\\n'; true")
    whole = {n for n, s in (line.split() for line in out.splitlines()) if int(s) == (source() / n).stat().st_size}
    parts = sh(rig, f"find {MODELS}/hf-cache -name '*.incomplete' -printf '%s\\n' 2>/dev/null; true")
    return whole, sum(int(x) for x in parts.split())


def test_killed_download_fails_the_wait_then_finishes_on_the_next_run(rig: Rig) -> None:
    reset_model(rig)
    knobs(throttle_bytes_per_s=total() // 10)
    assert deploy(rig, "tasks/model_start.py").ok  # returns once the unit runs
    wait_for(
        lambda: SMALL_SHARD in _partial_state(rig)[0] and _partial_state(rig)[1] > 12 * MIB,
        30,
        "a finished file and a partial shard",
    )
    sh(rig, f"systemctl kill --signal=KILL {UNIT}")
    wait_for(lambda: unit_active(rig) == "inactive", 10, "the unit to end")
    finished, partial = _partial_state(rig)
    assert partial > 0 and sh(rig, f"test -e {MODEL_DIR} && echo yes || echo no").strip() == "no"

    knobs()
    waited = deploy(rig, "tasks/model_finish.py")  # never a silent success
    assert not waited.ok and "stopped without a verdict" in waited.log

    clear_log()
    run = deploy(rig, *STAGE)
    assert run.ok, run.log[-3000:]
    assert "partial file(s) a killed download left behind" in journal(rig)
    print(f"\nkilled with {partial / MIB:.1f} MiB partial; next run fetched {sorted(set(fetched_names()))}")
    assert not set(fetched_names()) & finished and BIG_SHARD in fetched_names()
    assert host_digests(rig) == digests()


def test_download_timeout_stops_the_unit_and_fails_the_host(rig: Rig) -> None:
    reset_model(rig)
    knobs(throttle_bytes_per_s=total() // 90)
    started = time.monotonic()
    run = deploy(rig, *STAGE, data={"download_timeout_s": 60})
    elapsed = time.monotonic() - started
    knobs()
    assert not run.ok and "download_timeout_s=60 reached" in run.log
    print(f"\ndownload_timeout_s=60: the host failed after {elapsed:.0f}s")
    assert 60 <= elapsed < 100
    assert unit_active(rig) == "inactive" and status(rig)["phase"] == "stopped"
    run = deploy(rig, *STAGE)  # the next run continues
    assert run.ok, run.log[-3000:]
    assert host_digests(rig) == digests()


def test_a_rerun_reattaches_to_a_running_download(rig: Rig) -> None:
    reset_model(rig)
    knobs(throttle_bytes_per_s=total() // 12)
    first = start_deploy(rig, *STAGE)
    wait_for(lambda: status(rig).get("phase") == "downloading", 30, "the download")
    first.proc.send_signal(signal.SIGKILL)  # the control side dies mid-wait, and its SSH session with it
    first.proc.communicate(timeout=30)
    time.sleep(2)
    assert unit_active(rig) == "active"  # the download did not die with the connection
    run = deploy(rig, *STAGE)
    assert run.ok, run.log[-3000:]
    assert not [op for op in run.changed if op.startswith("Model (start) | Download")]  # re-attached, not restarted
    assert fetched_contents() == every_content()  # nothing fetched twice
    knobs()


def _clear_corruption_once_served(stop: threading.Event) -> None:
    while not stop.is_set():
        if any("corrupted" in r["events"] for r in gets(SMALL_SHARD)):
            knobs(throttle_bytes_per_s=total() // 6)
            return
        time.sleep(0.05)


def test_a_file_corrupted_in_flight_is_caught_and_fetched_again(rig: Rig) -> None:
    reset_model(rig)
    knobs(corrupt=[SMALL_SHARD], throttle_bytes_per_s=total() // 6)
    stop = threading.Event()
    watcher = threading.Thread(target=_clear_corruption_once_served, args=(stop,), daemon=True)
    watcher.start()
    try:
        run = deploy(rig, *STAGE)
    finally:
        stop.set()
        watcher.join(5)
        knobs()
    assert run.ok, run.log[-3000:]
    shard = gets(SMALL_SHARD)
    assert len(shard) == 2 and "corrupted" in shard[0]["events"] and shard[1]["events"] == []
    assert "the download ended without an error but 1 file(s) failed the check" in journal(rig)
    assert host_digests(rig) == digests()


def test_a_file_that_stays_corrupt_fails_the_host_naming_it(rig: Rig) -> None:
    reset_model(rig)
    knobs(corrupt=[SMALL_SHARD])
    run = deploy(rig, *STAGE)
    assert not run.ok
    assert f"still corrupt after a re-fetch: {SMALL_SHARD} (sha256 mismatch)" in run.log
    assert sh(rig, f"test -e {MODEL_DIR} && echo yes || echo no").strip() == "no"  # never switched to
    knobs()
    clear_log()
    assert deploy(rig, *STAGE).ok
    assert fetched_names() == [SMALL_SHARD]  # the verified files were kept
    assert host_digests(rig) == digests()


def test_new_revision_downloads_beside_and_switches_when_complete(rig: Rig) -> None:
    main_dir = snapshot_link()
    assert sh(rig, f"readlink {MODEL_DIR}").strip() == main_dir
    changed = {name for name, digest in digests("v2").items() if digests().get(name) != digest}
    clear_log()
    knobs(throttle_bytes_per_s=sum((source("v2") / n).stat().st_size for n in changed) // 5)
    background = start_deploy(rig, *STAGE, data={"model_revision": "v2"})
    try:
        wait_for(lambda: status(rig).get("phase") == "downloading", 30, "the download")
        assert sh(rig, f"readlink {MODEL_DIR}").strip() == main_dir  # the service still sees main, whole
        run = background.wait()
    finally:
        knobs()
    assert run.ok, run.log[-3000:]
    assert sh(rig, f"readlink {MODEL_DIR}").strip() == snapshot_link("v2")
    assert host_digests(rig) == digests("v2")
    assert set(fetched_names()) == changed  # the rest are blobs main has: linked by the library, then hashed
    assert sh(rig, f"test -e {MODELS}/{main_dir} && echo yes || echo no").strip() == "no"


# ---- the token --------------------------------------------------------------------------------------


@pytest.fixture
def own_mirror(tmp_path: Path) -> Iterator[tuple[str, list[str | None]]]:
    """A mirror of our own on a free port, with each request's Authorization header."""
    for running in hf_mirror.serving(tmp_path):
        yield running.url, running.server.authorizations


def test_token_is_sent_but_appears_nowhere(rig: Rig, own_mirror: tuple[str, list[str | None]]) -> None:
    url, seen = own_mirror
    token = f"hf_{secrets.token_hex(17)}"
    data: dict[str, object] = {"hf_endpoint": url, "hf_token": token, "model_dir": f"{MODELS}/with-token"}
    run = start_deploy(rig, *WITH_PREFLIGHT, data=data, flags=("-vv",)).wait()
    assert run.ok, run.log[-3000:]
    assert ">>> sudo" in run.log  # -vv echoes every command; none of them holds the token
    rerun = start_deploy(rig, *WITH_PREFLIGHT, data=data, flags=("-vvv",)).wait()
    assert rerun.ok and rerun.changed == []
    for output in (run, rerun):
        assert token not in output.log and token not in json.dumps(output.changed)
    assert seen and set(seen) == {f"Bearer {token}"}  # preflight's, model_fetch's and hf's requests
    assert sh(rig, "stat -c '%U:%G %a' /etc/vllm-rig/hf-token.env /etc/vllm-rig").split("\n")[:2] == [
        "root:root 600",
        "root:root 755",  # only the file is private: other stages' config lives in the directory
    ]
    assert token not in journal(rig)  # sudo logs every command pyinfra ran: none held the token
    # Everything else the stage wrote (state, scripts, the model's marker) holds no trace of it either.
    kept = "--exclude=etc/vllm-rig/hf-token.env var/lib/vllm-rig opt/vllm-rig/bin etc/vllm-rig"
    written = sh(rig, f"tar -C / -cf - {kept} {MODELS.lstrip('/')}/with-token/.vllm-rig-complete.json | base64 -w0")
    assert len(written) > 1000 and token.encode() not in base64.b64decode(written)

    seen.clear()
    data = {"hf_endpoint": url, "hf_token": None, "model_dir": f"{MODELS}/without-token"}
    run = deploy(rig, *WITH_PREFLIGHT, data=data)
    assert run.ok, run.log[-3000:]
    assert sh(rig, "test -e /etc/vllm-rig/hf-token.env && echo yes || echo no").strip() == "no"
    assert seen and set(seen) == {None}  # no token configured: none sent, not even an implicit one
