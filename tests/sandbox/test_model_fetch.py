"""vllm_rig/host/model_fetch.py against the HF mirror stand-in, with the real huggingface_hub 2.4.0 in its process.

The script runs as a subprocess with this venv's python, as the deploy runs it with the tools venv's; the
mirror runs in this process on a free port with its own knobs and request log.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import host_scripts
from tests.sandbox.fixtures import hf_mirror
from vllm_rig.host import model_fetch

SCRIPT = host_scripts.program("model_fetch")  # argv: python, the zip, the program
REPO = hf_mirror.REPO
source = hf_mirror.source
BIG_SHARD = "model-00001-of-00003.safetensors"
SMALL_SHARD = "model-00002-of-00003.safetensors"
MARKER = ".vllm-rig-complete.json"
MIB = 1 << 20


mf = model_fetch


Mirror = hf_mirror.Running


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    yield from hf_mirror.serving(tmp_path_factory.mktemp("hf-mirror-state"))


@pytest.fixture
def mirror(served: Mirror) -> Mirror:
    return served.reset()


@dataclass
class Box:
    """One test's host: the model dir's parent, the status file (kept apart) and HF_HOME."""

    tmp: Path

    @property
    def models(self) -> Path:
        return self.tmp / "models"

    @property
    def dest(self) -> Path:
        return self.models / "model"

    @property
    def status_file(self) -> Path:
        return self.tmp / "state" / "model-fetch.json"

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_file.read_text())


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def clean_env(box: Box, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    env.update(HF_HOME=str(box.tmp / "home"), **extra)
    return env


def fetch_command(mirror: Mirror, box: Box, *extra: str, repo: str = REPO) -> list[str]:
    return [
        *SCRIPT,
        "fetch",
        "--repo",
        repo,
        "--dest",
        str(box.dest),
        "--endpoint",
        mirror.url,
        "--disable-xet",
        "--status-file",
        str(box.status_file),
        *extra,
    ]


def run(command: list[str], box: Box, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=clean_env(box, **env), capture_output=True, text=True, timeout=180)


def fetch(mirror: Mirror, box: Box, *extra: str, repo: str = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    return run(fetch_command(mirror, box, *extra, repo=repo), box, **env)


def script(box: Box, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([*SCRIPT, *args], box, **env)


def digests(directory: Path) -> dict[str, str]:
    """sha256 of every served file (the marker and the client's .cache left out)."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MARKER and ".cache" not in p.relative_to(directory).parts
    }


def tree_state(top: Path) -> dict[str, tuple[str, int, int]]:
    """Every path under top with its kind, size and mtime: "nothing was written" means this is unchanged."""
    state = {}
    for p in sorted(top.rglob("*")):
        st = p.lstat()
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
        state[p.relative_to(top).as_posix()] = (kind, st.st_size if kind == "file" else 0, st.st_mtime_ns)
    return state


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def incomplete_bytes(top: Path) -> int:
    return sum(p.stat().st_size for p in top.rglob("*.incomplete") if p.is_file())


def snapshot_link(commit: str) -> str:
    """DIR's target: the commit's snapshot in huggingface_hub's cache beside it."""
    return f"hf-cache/models--{REPO.replace('/', '--')}/snapshots/{commit}"


def assert_complete(box: Box, mirror: Mirror, branch: str = "main") -> dict[str, Any]:
    """DIR is a symlink to a verified snapshot equal to the source, with a marker that says so."""
    commit = mirror.commit(branch)
    assert box.dest.is_symlink() and os.readlink(box.dest) == snapshot_link(commit)
    assert digests(box.dest) == digests(source(branch))
    marker = json.loads((box.dest / MARKER).read_text())
    assert marker["repo"] == REPO and marker["commit"] == commit
    assert marker["endpoint"] == mirror.url
    assert {p: m["sha256"] for p, m in marker["files"].items()} == digests(source(branch))
    assert {p: m["size"] for p, m in marker["files"].items()} == {
        p.name: p.stat().st_size for p in source(branch).iterdir()
    }
    assert not (box.dest / ".cache").exists() and not list(box.models.rglob("*.incomplete"))
    assert not list(box.models.glob("model.partial-*"))
    return marker


# -- the whole flow ---------------------------------------------------------------------------------


def test_full_fetch_verifies_every_file_and_writes_the_marker(mirror: Mirror, box: Box) -> None:
    box.dest.mkdir(parents=True)  # an empty placeholder becomes the symlink
    started = time.monotonic()
    result = fetch(mirror, box)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"\nfull fetch of {sum(p.stat().st_size for p in source().iterdir()) / MIB:.1f} MiB: {elapsed:.2f}s")
    marker = assert_complete(box, mirror)
    assert marker["revision"] == "main" and marker["total_bytes"] == sum(p.stat().st_size for p in source().iterdir())
    # Each file once, whole; two files of the same content are one blob in the cache, fetched once.
    assert all(len(mirror.gets(name)) <= 1 for name in digests(source()))
    assert {digests(source())[g["path"].rsplit("/", 1)[1]] for g in mirror.gets()} == set(digests(source()).values())
    assert len(mirror.gets()) == len(set(digests(source()).values()))
    status = box.status()
    assert status["phase"] == "done" and status["exit_code"] == 0
    assert status["bytes_done"] == status["bytes_total"] == marker["total_bytes"]
    # Read-only for everyone but root: the service reads it, cannot change it.
    version = box.dest.resolve()
    assert (version.stat().st_mode & 0o7777) == 0o755
    assert all((p.stat().st_mode & 0o7777) == 0o644 for p in version.iterdir())


def test_second_fetch_and_check_are_instant_and_offline(mirror: Mirror, box: Box) -> None:
    assert fetch(mirror, box).returncode == 0
    mirror.log_file.write_text("")
    mirror.set_knobs(down="refuse")  # the marker answers: no network at all
    timings = {}
    for name, command in {
        "fetch": fetch_command(mirror, box),
        "check": [*SCRIPT, "check", "--repo", REPO, "--revision", "main", "--dest", str(box.dest)],
    }.items():
        started = time.monotonic()
        result = run(command, box)
        timings[name] = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
    print(f"\nre-run with a matching marker: fetch {timings['fetch']:.2f}s, check {timings['check']:.2f}s")
    assert mirror.log() == []
    assert max(timings.values()) < 1.0
    # The commit itself also matches a marker written for "main".
    assert script(box, "check", "--repo", REPO, "--revision", mirror.commit(), "--dest", str(box.dest)).returncode == 0


def test_check_tells_incomplete_from_corrupt(mirror: Mirror, box: Box) -> None:
    def check(revision: str = "main") -> int:
        return script(box, "check", "--repo", REPO, "--revision", revision, "--dest", str(box.dest)).returncode

    assert check() == 3  # nothing there yet
    assert fetch(mirror, box).returncode == 0
    assert check() == 0
    assert check(revision="v2") == 3  # another revision is not this one
    shard = box.dest / SMALL_SHARD
    shard.write_bytes(shard.read_bytes()[:-1])
    result = script(box, "check", "--repo", REPO, "--revision", "main", "--dest", str(box.dest))
    assert result.returncode == 4 and SMALL_SHARD in result.stdout
    shard.unlink()
    assert check() == 3


def test_fetch_repairs_a_damaged_snapshot_by_fetching_only_the_damaged_file(mirror: Mirror, box: Box) -> None:
    assert fetch(mirror, box).returncode == 0
    before = box.dest.resolve()
    (box.dest / SMALL_SHARD).write_bytes(b"truncated")
    mirror.log_file.write_text("")
    result = fetch(mirror, box)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [g["path"].rsplit("/", 1)[1] for g in mirror.gets()] == [SMALL_SHARD]
    assert digests(box.dest) == digests(source())
    assert box.dest.resolve() == before  # repaired in place: the service was reading the damaged file anyway


# -- faults -----------------------------------------------------------------------------------------


def test_connection_dropped_mid_shard_refetches_at_most_10_mib(mirror: Mirror, box: Box) -> None:
    mirror.set_knobs(drop_after_bytes={"path": BIG_SHARD, "bytes": 15_000_000})
    result = fetch(mirror, box)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete(box, mirror)
    gets = mirror.gets(BIG_SHARD)
    assert len(gets) == 2 and "dropped at 15000000" in gets[0]["events"]
    refetched = sum(g["bytes"] for g in gets) - (source() / BIG_SHARD).stat().st_size
    print(f"\nre-fetched after the drop: {refetched / MIB:.2f} MiB")
    assert 0 < refetched <= 10 * MIB


def test_killed_fetch_finishes_on_the_next_run(mirror: Mirror, box: Box) -> None:
    total = sum(p.stat().st_size for p in source().iterdir())
    mirror.set_knobs(throttle_bytes_per_s=total // 8)  # about 8 s for the whole repo
    proc = subprocess.Popen(fetch_command(mirror, box), env=clean_env(box), stdout=subprocess.PIPE, text=True)
    staging = box.models / snapshot_link(mirror.commit())
    # Kill once some files are whole and a shard is partly written, so both kinds of leftover exist.
    wait_for(
        lambda: (staging / SMALL_SHARD).is_file() and incomplete_bytes(box.models) > 12 * MIB,
        30,
        "a finished file and a partial shard",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    finished = {p.name for p in staging.iterdir() if p.is_file()}
    left = incomplete_bytes(box.models)
    assert SMALL_SHARD in finished and left > 0 and not box.dest.exists()
    # The lock goes with the process.
    with (box.models / ".model.fetch.lock").open("a") as lock:
        wait_for(lambda: _can_lock(lock.fileno()), 10, "the lock to be free")

    assert box.status()["exit_code"] is None  # no verdict: the deploy says the download stopped (killed?)
    mirror.set_knobs()
    mirror.log_file.write_text("")
    result = fetch(mirror, box)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "removed" in result.stdout and "partial file" in result.stdout
    assert_complete(box, mirror)
    refetched = {g["path"].rsplit("/", 1)[1] for g in mirror.gets()}
    print(f"\nkilled with {left / MIB:.1f} MiB partial; next run fetched {sorted(refetched)}")
    assert not refetched & finished  # whole files from the killed run were kept, not fetched again
    assert BIG_SHARD in refetched


def _can_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _clear_corruption_after_first_serve(monkeypatch: pytest.MonkeyPatch, mirror: Mirror) -> None:
    """Corrupt the first fetch only: the mirror's log hook drops the knob once a corrupted body went out."""
    original = mirror.server.log

    def log(record: dict[str, Any]) -> None:
        original(record)
        if "corrupted" in record["events"]:
            mirror.set_knobs()

    monkeypatch.setattr(mirror.server, "log", log)


def test_corrupted_file_is_caught_and_fixed_by_one_refetch(
    mirror: Mirror, box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_corruption_after_first_serve(monkeypatch, mirror)
    mirror.set_knobs(corrupt=[SMALL_SHARD])
    result = fetch(mirror, box)
    assert result.returncode == 0, result.stdout + result.stderr
    gets = mirror.gets(SMALL_SHARD)
    assert len(gets) == 2 and "corrupted" in gets[0]["events"] and gets[1]["events"] == []
    assert "the download ended without an error but" in result.stdout and SMALL_SHARD in result.stdout
    assert_complete(box, mirror)


def test_persistent_corruption_exits_4_naming_the_file(mirror: Mirror, box: Box) -> None:
    mirror.set_knobs(corrupt=[SMALL_SHARD])
    result = fetch(mirror, box)
    assert result.returncode == 4
    assert SMALL_SHARD in result.stderr and "sha256 mismatch" in result.stderr
    assert len(mirror.gets(SMALL_SHARD)) == 2  # the first fetch and exactly one more
    assert not box.dest.exists() and not box.dest.is_symlink()  # nothing switched
    assert box.status()["exit_code"] == 4 and box.status()["phase"] == "failed"
    # Once the mirror serves good bytes, the next run fetches only that file.
    mirror.set_knobs()
    mirror.log_file.write_text("")
    assert fetch(mirror, box).returncode == 0
    assert [g["path"].rsplit("/", 1)[1] for g in mirror.gets()] == [SMALL_SHARD]
    assert_complete(box, mirror)


def _old_local_dir(box: Box) -> None:
    """What a plain `hf download` left: files and the client's .cache, no marker (its rc 0 trap)."""
    box.dest.mkdir(parents=True)
    for name in ("config.json", SMALL_SHARD):
        shutil.copy2(source() / name, box.dest / name)
    (box.dest / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (box.dest / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text("x\n")


@pytest.mark.parametrize(
    ("knobs", "repo", "revision", "says"),
    [
        ({}, "nobody/nothing", "main", "repository not found"),
        ({}, REPO, "no-such-branch", "no such revision"),
        ({"down": "503"}, REPO, "main", "answered HTTP 503"),
        ({"down": "refuse"}, REPO, "main", "could not reach"),
        ({"unknown_repos": "404-bare"}, "nobody/nothing", "main", "not found"),
    ],
)
def test_unreachable_or_unknown_exits_2_before_writing_anything(
    mirror: Mirror, box: Box, knobs: dict[str, Any], repo: str, revision: str, says: str
) -> None:
    _old_local_dir(box)
    before = tree_state(box.models)
    mirror.set_knobs(**knobs)
    started = time.monotonic()
    result = fetch(mirror, box, "--revision", revision, repo=repo)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{repo}@{revision}" in lines[0] and mirror.url in lines[0] and says in lines[0]
    assert tree_state(box.models) == before
    assert box.status()["exit_code"] == 2 and box.status()["message"] == lines[0].removeprefix("model_fetch: ")
    assert elapsed < 10
    assert mirror.gets() == []


def test_hand_made_dir_is_kept_aside_and_its_good_files_reused(mirror: Mirror, box: Box) -> None:
    _old_local_dir(box)
    result = fetch(mirror, box)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete(box, mirror)
    fetched = {digests(source())[g["path"].rsplit("/", 1)[1]] for g in mirror.gets()}
    assert fetched == set(digests(source()).values()) - {digests(source())[n] for n in ("config.json", SMALL_SHARD)}
    (aside,) = box.models.glob("model.replaced-*")
    assert (aside / "config.json").is_file() and "moved the existing directory" in result.stdout


def test_stop_by_sigterm_ends_the_download_at_once_and_says_so(mirror: Mirror, box: Box) -> None:
    # 1 MiB/s: the download outlasts a busy machine's delay between "downloading" and the SIGTERM (at 4 MiB/s
    # it once finished first, exit 0, with other work on the 2 cores).
    mirror.set_knobs(throttle_bytes_per_s=1 * MIB)
    proc = subprocess.Popen(fetch_command(mirror, box), env=clean_env(box), stdout=subprocess.PIPE, text=True)
    wait_for(lambda: box.status_file.exists() and box.status()["phase"] == "downloading", 20, "the download")
    proc.terminate()
    # At 1 MiB/s the library's threads would take a minute to finish their files: the stop does not wait.
    assert proc.wait(20) == 128 + signal.SIGTERM
    with (box.models / ".model.fetch.lock").open("a") as lock:
        assert _can_lock(lock.fileno())
    assert box.status()["phase"] == "stopped" and box.status()["exit_code"] == 3
    mirror.set_knobs()
    assert fetch(mirror, box).returncode == 0
    assert_complete(box, mirror)


def test_token_is_sent_but_never_printed(mirror: Mirror, box: Box, tmp_path: Path) -> None:
    token = f"hf_{secrets.token_hex(16)}"
    outputs = [
        fetch(mirror, box, HF_TOKEN=token),
        fetch(mirror, box, "--revision", "v2", HF_TOKEN=token),
        fetch(mirror, box, repo="nobody/nothing", HF_TOKEN=token),
    ]
    assert [r.returncode for r in outputs] == [0, 0, 2]
    for result in outputs:
        assert token not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size < 10 * MIB]
    assert written and not [p for p in written if token.encode() in p.read_bytes()]
    seen = mirror.server.authorizations
    assert seen and set(seen) == {f"Bearer {token}"}  # every request: the preflight's and the download's

    # Without HF_TOKEN nothing is sent, even with a token file in HF_HOME (implicit tokens are off).
    seen.clear()
    (box.tmp / "home").mkdir(exist_ok=True)
    (box.tmp / "home" / "token").write_text(token)
    shutil.rmtree(box.models)
    assert fetch(mirror, box).returncode == 0
    assert seen and set(seen) == {None}


def test_new_revision_downloads_beside_and_switches_when_complete(mirror: Mirror, box: Box) -> None:
    assert fetch(mirror, box).returncode == 0
    main_dir = box.dest.resolve()
    main_files, v2_files = digests(source()), digests(source("v2"))
    changed = {p for p, d in v2_files.items() if main_files.get(p) != d}
    mirror.log_file.write_text("")
    changed_bytes = sum((source("v2") / p).stat().st_size for p in changed)
    mirror.set_knobs(throttle_bytes_per_s=changed_bytes // 4)  # about 4 s
    proc = subprocess.Popen(
        fetch_command(mirror, box, "--revision", "v2"), env=clean_env(box), stdout=subprocess.PIPE, text=True
    )
    try:
        staging = box.models / snapshot_link(mirror.commit("v2"))
        wait_for(lambda: staging.is_dir() and box.status().get("phase") == "downloading", 20, "the download")
        # Meanwhile the service's view is the old model, whole.
        assert box.dest.resolve() == main_dir and digests(box.dest) == main_files
        check = script(box, "check", "--repo", REPO, "--revision", "main", "--dest", str(box.dest))
        assert check.returncode == 0
        progress = mf.status_line(box.status())  # what `bin/status` prints
        assert progress.startswith("downloading: ") and " of " in progress and "files" in progress
        second = fetch(mirror, box, "--revision", "v2")
        assert second.returncode == 6 and "another fetch" in second.stderr
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert_complete(box, mirror, "v2")
    assert not main_dir.exists()  # the previous snapshot goes once the switch is done (delete_revisions)
    # The rest are blobs the cache holds already (same ETag), linked by the library, then hashed.
    assert {g["path"].rsplit("/", 1)[1] for g in mirror.gets()} == changed
    assert box.status()["exit_code"] == 0 and mf.status_line(box.status()).startswith("done: ")
