"""vllm_rig/host/fork_releases.py against a real git remote with the fork's kind of tags, and the listing's lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.host import fork_releases as fr
from vllm_rig.known import fork_lines
from vllm_rig.stages.update.releases import line_notes, release_lines
from vllm_rig.validation import load_settings

ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}  # fmt: skip


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def remote(tmp_path: Path) -> dict[str, str]:
    """v0.1.17, main one commit later, v0.1.18 and an rc after it, an annotated v0.1.16 before, a 0.2.x preview."""
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    shas = {}

    def commit(name: str) -> str:
        (work / "VERSION").write_text(name + "\n")
        _git("add", "-A", cwd=work)
        _git("-c", "commit.gpgsign=false", "commit", "-q", "-m", name, cwd=work)
        return _git("rev-parse", "HEAD", cwd=work)

    shas["v0.1.16"] = commit("0.1.16")
    _git("tag", "-a", "-m", "v0.1.16", "v0.1.16", cwd=work)  # annotated: ls-remote peels it
    shas["v0.1.17"] = commit("0.1.17")
    _git("tag", "v0.1.17", cwd=work)
    shas["main"] = commit("0.1.18.dev0")
    shas["v0.1.18-rc1"] = commit("0.1.18rc1")
    _git("tag", "v0.1.18-rc1", cwd=work)
    shas["v0.1.18"] = commit("0.1.18")
    _git("tag", "v0.1.18", cwd=work)
    _git("checkout", "-q", "-b", "vllm-2080ti-definitive-0.2.x", shas["main"], cwd=work)
    shas["v0.2.1-pre2"] = commit("0.2.1-pre2")
    _git("tag", "v0.2.1-pre2", cwd=work)
    _git("checkout", "-q", "main", cwd=work)
    _git("reset", "-q", "--hard", shas["main"], cwd=work)
    bare = tmp_path / "fork.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    shas["url"] = str(bare)
    cache = tmp_path / "cache.git"  # the runtime stage's cache: the pinned commit alone (shallow, by commit), no tags
    _git("init", "-q", "--bare", str(cache), cwd=tmp_path)
    _git("-C", str(cache), "fetch", "-q", "--depth=1", f"file://{bare}", shas["main"], cwd=tmp_path)
    _git("-C", str(cache), "update-ref", f"refs/pins/{shas['main']}", shas["main"], cwd=tmp_path)
    shas["cache"] = str(cache)
    return shas


def test_a_commit_past_a_release_is_that_release_and_only_newer_plain_tags_of_the_line_count(remote) -> None:
    out = fr.releases(remote["url"], "v0.1", remote["main"], Path(remote["cache"]))
    assert out["error"] is None and out["current"] == "v0.1.17"
    assert [(r["tag"], r["newer"]) for r in out["releases"]] == [
        ("v0.1.16", False),
        ("v0.1.17", False),
        ("v0.1.18", True),
    ]
    assert out["releases"][0]["commit"] == remote["v0.1.16"]  # the annotated tag's commit, not the tag object
    tags = _git("-C", remote["cache"], "tag", cwd=Path(remote["cache"])).split()
    assert set(tags) >= {"v0.1.16", "v0.1.17", "v0.1.18"}  # the line's tags went into the cache (git follows others)


def test_a_pinned_release_commit_needs_no_cache(remote) -> None:
    out = fr.releases(remote["url"], "v0.1", remote["v0.1.17"], None)
    assert out["current"] == "v0.1.17" and [r["tag"] for r in out["releases"] if r["newer"]] == ["v0.1.18"]


def test_without_history_an_unreleased_pin_says_it_cannot_tell(remote) -> None:
    out = fr.releases(remote["url"], "v0.1", remote["main"], None)
    assert out["current"] is None and "could not be read" in out["error"]
    assert {r["newer"] for r in out["releases"]} == {None}
    assert "newer or not: unknown" in "\n".join(release_lines(out))


def test_an_unreachable_remote_is_one_error(tmp_path: Path) -> None:
    out = fr.releases(str(tmp_path / "nothing.git"), "v0.1", "a" * 40, None)
    assert out["releases"] == [] and out["error"].startswith("git ls-remote --tags")
    assert fr.main(["--url", str(tmp_path / "nothing.git"), "--line", "v0.1", "--ref", "a" * 40]) == 2


@pytest.mark.parametrize(
    ("tag", "line", "on"),
    [("v0.1.18", "v0.1", True), ("v0.1", "v0.1", False), ("v0.10.1", "v0.1", False), ("v0.2.1-pre2", "v0.2", False),
     ("0.1.5", "v0.1", True), ("v0.1.18-rc1", "v0.1", False)],
)  # fmt: skip
def test_on_line(tag: str, line: str, on: bool) -> None:
    assert fr.on_line(tag, line) is on


def test_the_lines_name_the_update_command_for_each_newer_release(remote) -> None:
    out = fr.releases(remote["url"], "v0.1", remote["main"], Path(remote["cache"]))
    text = "\n".join(release_lines(out))
    assert "is v0.1.17" in text and "fork_ref is past it" in text
    assert f"tasks/update_fork.py --data fork_ref={remote['v0.1.18']}" in text and "newer releases: v0.1.18" in text


@pytest.mark.parametrize("profile", [None, "qwen38", "fork_validated"], ids=["default", "qwen38", "fork_validated"])
def test_every_profile_is_told_its_line_and_what_the_newer_line_asks(profile: str | None) -> None:
    """`bin/rig releases`: the default profile serves an upstream vLLM release; qwen38 and fork_validated the
    fork's v0.1.x line, which the fork's README calls no longer maintained; every profile hears what 0.2 needs."""
    s = load_settings(profile_data(profile))
    text = "\n".join(line_notes(s))
    if profile is None:
        assert text.startswith(f"line: upstream vLLM release {s.vllm_version} (runtime_kind upstream), not the fork")
    else:
        assert s.runtime_kind == "fork" and s.fork_release_line == "v0.1" and s.fork_ref.startswith("63cfe89")
        first = text.splitlines()[0]
        assert first.startswith("line: the fork's v0.1.x line at fork_ref 63cfe89659bc (vLLM 0.21.0 base, CUDA 12.8")
        assert 'legacy: "no longer actively maintained"' in first
    for need in ("v0.2.2-post3", "vLLM 0.29.1rc0 nightly", "CUDA 13.0", "torch 2.13.0+cu130", "GCC 15", "kernel >= 7"):
        assert need in text, need
    assert "ALLOW_HOST_MISMATCH=1" in text and ", uv" in text
    assert "on Ubuntu 24.04: not as it stands: stock 24.04 has GCC 13" in text and "(belief)" in text


def test_a_host_on_the_newer_line_is_not_told_about_it_twice() -> None:
    s = load_settings({**profile_data("qwen38"), "fork_release_line": "v0.2"})
    notes = line_notes(s)
    assert notes == [
        f"line: the fork's v0.2.x line at fork_ref {s.fork_ref[:12]} (vLLM 0.29.1rc0 nightly (b23433088bf2) base, "
        f"CUDA 13.0, torch 2.13.0+cu130, latest release {fork_lines.V0_2.latest}): {fork_lines.V0_2.status}"
    ]
