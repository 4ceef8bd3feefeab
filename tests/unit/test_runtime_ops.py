"""Runtime-stage operations planned on pyinfra's @fake host (facts answered from canned outputs), and the
git checkout scripts run for real against a local repository."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.fake_host import plan as _plan
from vllm_rig.core.git import GitCheckouts, GitSource, checkout_matches, checkout_script, fetch_script, git_checkouts
from vllm_rig.paths import FLASHQLA_STAMP, HOST_FINGERPRINT, SERVED_WITH_DIR, SWITCHED_STAMP
from vllm_rig.stages.runtime import served_with
from vllm_rig.stages.runtime.operations import (
    build_runtime,
    clear_host_caches,
    restart_if_stale,
    switch_runtime,
)

ROOT = "/opt/vllm-rig"
FP = "ab" * 32


def _runtimes(current: str | None, previous: str | None = None, **runtimes: str) -> dict[str, list[str]]:
    lines = ["@@current", *([f"{ROOT}/runtimes/{current}"] if current else []), "@@previous"]
    lines += [f"{ROOT}/runtimes/{previous}"] if previous else []
    lines += ["@@runtimes", *(f"{n}\t{FP}\t{flags}" for n, flags in runtimes.items())]
    return {"echo @@runtimes": lines}


def test_a_complete_runtime_is_not_built_again() -> None:
    responses = {"echo @@complete": ["@@complete", "yes", "@@unit", "@@status", "@@others"]}
    changed, _ = _plan(
        responses,
        build_runtime,
        runtime="/r/x",
        unit="u.service",
        package="/b",
        spec="/s",
        spec_text="{}",
        log="/l",
        timeout_s=9,
    )
    assert changed is False


def test_a_new_build_starts_a_transient_unit_and_follows_it() -> None:
    responses = {"echo @@complete": ["@@complete", "@@unit", "ActiveState=inactive", "@@status", "@@others"]}
    changed, commands = _plan(
        responses,
        build_runtime,
        runtime="/r/x",
        unit="u.service",
        package="/b",
        spec="/s",
        spec_text="{}",
        log="/l",
        timeout_s=9,
    )
    assert changed is True
    assert "chmod 600 /s" in commands[1] and "systemd-run" in commands[2]
    assert commands[3].startswith("FunctionCommand(_follow")


def test_a_running_build_is_re_attached_not_restarted() -> None:
    responses = {
        "echo @@complete": ["@@complete", "@@unit", "ActiveState=active", "InvocationID=abc", "@@status", "@@others"]
    }
    _, commands = _plan(
        responses,
        build_runtime,
        runtime="/r/x",
        unit="u.service",
        package="/b",
        spec="/s",
        spec_text="{}",
        log="/l",
        timeout_s=9,
    )
    assert len(commands) == 1 and commands[0].startswith("FunctionCommand(_follow")


def test_another_running_build_stops_this_one() -> None:
    responses = {
        "echo @@complete": ["@@complete", "@@unit", "ActiveState=inactive", "@@status", "@@others", "other.service"]
    }
    _, commands = _plan(
        responses,
        build_runtime,
        runtime="/r/x",
        unit="u.service",
        package="/b",
        spec="/s",
        spec_text="{}",
        log="/l",
        timeout_s=9,
    )
    assert len(commands) == 1 and commands[0].startswith("FunctionCommand(fail_host")


SWITCH = {
    "root": ROOT,
    "target": "new",
    "flashinfer_cache": "/var/lib/vllm/.cache/flashinfer",
    "unit_path": "/etc/systemd/system/vllm.service",
    "environment_file": "/etc/vllm-rig/vllm-environment.env",
}


def _stamps(**stamps: tuple[int, str]) -> dict[str, list[str]]:
    """What the Stamps fact prints for these stamps: path, mtime and key per line."""
    return {"echo @@stamps": ["@@stamps", *(f"{path}\t{mtime}\t{key}" for path, (mtime, key) in stamps.items())]}


def test_switch_keeps_the_old_runtime_as_previous_and_clears_flashinfer_jit() -> None:
    responses = {**_runtimes("old", None, old="complete\t\t", new="complete\t\t"), **_stamps()}
    changed, commands = _plan(responses, switch_runtime, **SWITCH)
    assert changed is True
    save, rest = commands[0].split("; fi && ", 1)
    # First the unit and environment the old runtime served with, kept for a rollback to it (served_with.py).
    assert save + "; fi" == served_with.save_command(SWITCH["unit_path"], SWITCH["environment_file"], "old")
    assert f"cp -p /etc/systemd/system/vllm.service {SERVED_WITH_DIR}/old/unit" in save
    steps = rest.split(" && ")
    assert steps[:4] == [
        f"ln -sfn {ROOT}/runtimes/new {ROOT}/.current.new",
        f"mv -T {ROOT}/.current.new {ROOT}/current",
        f"ln -sfn {ROOT}/runtimes/old {ROOT}/.previous.new",
        f"mv -T {ROOT}/.previous.new {ROOT}/previous",
    ]
    assert steps[4] == "rm -rf /var/lib/vllm/.cache/flashinfer"
    assert steps[-1] == f"printf '%s\\n' {ROOT}/runtimes/new > {SWITCHED_STAMP}"  # the stamp names the runtime
    assert commands[1] == "FunctionCommand(_forget, (), {})" and len(commands) == 2
    done = {**_runtimes("new", "old", old="complete", new="complete"), **_stamps()}
    done |= _stamps(**{SWITCHED_STAMP: (100, f"{ROOT}/runtimes/new")})
    assert _plan(done, switch_runtime, **SWITCH)[0] is False


def test_a_switch_cut_before_its_stamp_records_it_on_the_next_run() -> None:
    responses = {**_runtimes("new", "old", old="complete", new="complete"), **_stamps()}
    responses |= _stamps(**{SWITCHED_STAMP: (100, f"{ROOT}/runtimes/old")})
    changed, commands = _plan(responses, switch_runtime, **SWITCH)
    assert changed and not commands[0].startswith("ln ") and commands[0].endswith(SWITCHED_STAMP)


def test_switch_removes_runtimes_other_than_current_previous_and_a_running_build() -> None:
    responses = _runtimes(
        "old", "older", older="complete\t\t", old="complete\t\t", new="complete\t\t", c="\t\t", d="\t\tactive"
    )
    _, commands = _plan(responses, switch_runtime, **SWITCH)
    assert commands[-2] == f"rm -rf {ROOT}/runtimes/c {ROOT}/runtimes/older"  # new is current, old is previous
    assert commands[-1] == f"rm -rf {SERVED_WITH_DIR}/c {SERVED_WITH_DIR}/older"  # and the units they served with
    kept = _runtimes("new", "old", old="complete\t\t", new="complete\t\t", c="\t\t")
    kept |= _stamps(**{SWITCHED_STAMP: (100, f"{ROOT}/runtimes/new")})
    _, commands = _plan(kept, switch_runtime, **SWITCH)
    assert commands[0] == f"rm -rf {ROOT}/runtimes/c"  # a failed build's runtime, after a re-run that kept current


def test_caches_are_cleared_only_when_kernel_or_driver_changed() -> None:
    loaded = {"echo @@kernel": ["@@kernel", "k1", "@@driver", "580.1"]}
    same = {**loaded, **_stamps(**{HOST_FINGERPRINT: (100, "kernel=k1 driver=580.1")})}
    assert _plan(same, clear_host_caches, caches=["/c1", "/c2/*"])[0] is False
    moved = {**loaded, **_stamps(**{HOST_FINGERPRINT: (100, "kernel=k1 driver=580.0")})}
    changed, commands = _plan(moved, clear_host_caches, caches=["/c1", "/c2/*"])
    assert changed and commands[0].startswith(f"rm -rf /c1 /c2/* && rm -f {FLASHQLA_STAMP} && mkdir -p")
    assert commands[0].endswith(f"'kernel=k1 driver=580.1' > {HOST_FINGERPRINT}")
    assert _plan(loaded, clear_host_caches, caches=["/c1"])[0] is True  # first run: nothing recorded


def test_a_stale_service_is_restarted_with_try_restart() -> None:
    stamps = _stamps(**{SWITCHED_STAMP: (200, "/r/a"), HOST_FINGERPRINT: (50, "k")})
    stale = {"echo @@started": ["@@state", "active", "@@started", "100"], **stamps}
    changed, commands = _plan(stale, restart_if_stale, service="vllm", stamps_loaded=[SWITCHED_STAMP, HOST_FINGERPRINT])
    assert changed and commands == ["systemctl try-restart vllm.service"]
    fresh = {"echo @@started": ["@@state", "active", "@@started", "300"], **stamps}
    assert _plan(fresh, restart_if_stale, service="vllm", stamps_loaded=[SWITCHED_STAMP])[0] is False
    # Only the stamps named count: the host fingerprint is older than the start, the switch newer.
    assert _plan(stale, restart_if_stale, service="vllm", stamps_loaded=[HOST_FINGERPRINT])[0] is False


def test_git_checkouts_are_decided_by_head_in_one_read() -> None:
    sha = "c" * 40
    sources = (GitSource("a", "u", sha, "/d1", "/c1"), GitSource("b", "u2", "e" * 40, "/d2", "/c2"))
    at = {"set -- /d1": ["@@checkouts", f"/d1\t{sha}", f"/d2\t{'e' * 40}"]}
    assert _plan(at, git_checkouts, sources=sources)[0] is False
    elsewhere = {"set -- /d1": ["@@checkouts", f"/d1\t{'d' * 40}", f"/d2\t{'e' * 40}"]}
    changed, commands = _plan(elsewhere, git_checkouts, sources=sources)
    assert changed and len(commands) == 2 and "/c1" in commands[0] and "/d1.partial" in commands[1]


# ---- the git scripts, for real --------------------------------------------------------------------------


def _git(*args: str, cwd: Path) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    proc = subprocess.run(["git", *identity, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "a.txt").write_text("one\n")
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    _git("tag", "v1.0", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    (work / "a.txt").write_text("two\n")
    _git("commit", "-q", "-am", "two", cwd=work)
    return work, {"v1.0": first, "main": _git("rev-parse", "HEAD", cwd=work)}


def _checkout(url: str, ref: str, dest: Path, cache: Path) -> dict[str, str | None]:
    for script in (fetch_script(url, ref, str(cache)), checkout_script(url, ref, str(dest), str(cache))):
        subprocess.run(["sh", "-c", script], check=True, capture_output=True)
    out = subprocess.run(["sh", "-c", GitCheckouts().command(((str(dest), ref),))], capture_output=True, text=True)
    return GitCheckouts().process(out.stdout.splitlines())[str(dest)]


def test_checkouts_pin_commits_through_the_cache(remote: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    work, shas = remote
    cache = tmp_path / "cache.git"
    found = _checkout(str(work), shas["main"], tmp_path / "a", cache)
    assert found["head"] == shas["main"] and checkout_matches(found, shas["main"])
    assert (tmp_path / "a" / "a.txt").read_text() == "two\n"
    found = _checkout(str(work), shas["v1.0"], tmp_path / "b", cache)
    assert found["head"] == shas["v1.0"] and checkout_matches(found, shas["v1.0"])
    # A second runtime at a commit the cache has needs no remote at all.
    found = _checkout(str(tmp_path / "gone"), shas["main"], tmp_path / "c", cache)
    assert found["head"] == shas["main"]
    assert not (tmp_path / "c.partial").exists()


def test_a_moved_tag_cannot_choose_the_code(remote: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """The attack: the remote (or a mirror) moves v1.0 to other code. A tag is never checked out, and the
    checkout pinned at the tag's commit stays there, judged by HEAD alone."""
    work, shas = remote
    _git("tag", "-f", "v1.0", shas["main"], cwd=work)  # moved
    for build in (fetch_script, lambda u, r, c: checkout_script(u, r, str(tmp_path / "x"), c)):
        with pytest.raises(ValueError, match="not a 40-character commit"):
            build(str(work), "v1.0", str(tmp_path / "cache.git"))
    assert not checkout_matches({"head": shas["main"]}, "v1.0")
    found = _checkout(str(work), shas["v1.0"], tmp_path / "pinned", tmp_path / "cache.git")
    assert found["head"] == shas["v1.0"] and (tmp_path / "pinned" / "a.txt").read_text() == "one\n"


def test_a_commit_the_remote_does_not_have_fails_and_leaves_no_checkout(
    remote: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    work, _ = remote
    script = fetch_script(str(work), "0" * 40, str(tmp_path / "cache.git"))
    assert subprocess.run(["sh", "-c", script], capture_output=True).returncode != 0
    assert not (tmp_path / "d").exists()


class _Host:
    name = "box"

    def get_fact(self, *args: Any, **kwargs: Any) -> list[str]:
        return ["last log line"]


def test_a_build_stopped_by_its_timeout_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from vllm_rig.stages.runtime.operations import _verdict

    found = {"complete": False, "unit": {"Result": "timeout"}, "status": {"state": "running"}}
    assert _verdict(_Host(), found, "/r", "u.service", "/l.log") is False
    assert "build_timeout_s" in caplog.text and "`current` is unchanged" in caplog.text
    failed = {"complete": False, "unit": {"Result": "exit-code"}, "status": {"error": "step compile: boom"}}
    assert _verdict(_Host(), failed, "/r", "u.service", "/l.log") is False
    assert "runtime build failed: step compile: boom" in caplog.text and "last log line" in caplog.text
