"""CHANGELOG.md names the commit of every entry: each one it names must be in this repository's history (a
squashed or rebased branch once left every 2026-12-02/03 entry pointing at commits that were never on main)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMIT = re.compile(r"\b[0-9a-f]{7}\b")


def named_commits(text: str) -> set[str]:
    return set(COMMIT.findall(text))


def missing(commits: set[str]) -> list[str]:
    """The names of `commits` that are no commit of this repository."""
    out = []
    for name in sorted(commits):
        found = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{name}^{{commit}}"], capture_output=True, check=False
        )
        if found.returncode != 0:
            out.append(name)
    return out


def test_the_changelog_names_commits() -> None:
    assert len(named_commits((REPO / "CHANGELOG.md").read_text())) >= 20


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git history")
def test_every_commit_the_changelog_names_is_in_the_history() -> None:
    assert missing(named_commits((REPO / "CHANGELOG.md").read_text())) == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git history")
def test_a_commit_that_is_not_in_the_history_is_named() -> None:
    assert missing({"0000000", "d9c8fba"}) == ["0000000"]
