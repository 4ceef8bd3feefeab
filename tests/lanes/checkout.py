"""The checkout a lane runs in. Lane 1 runs in the repo itself; every other lane in a copy of its files under
`.sandbox/lanes/<n>/`, so that whatever a scenario writes beside the code (`.sandbox/` with its machines,
`lan-ca/`, `triage/`, `runtime-artifacts/`, `bench-results/`) is the lane's own. The copy's own `.sandbox/`
is kept between runs (its machines' trees and built fixtures), everything else is laid anew."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

KEEP = ".sandbox"


def lane_root(repo: Path, lane: int) -> Path:
    return repo if lane == 1 else repo / ".sandbox" / "lanes" / str(lane) / repo.name


def files(repo: Path) -> list[str]:
    """What a clone of this checkout would hold: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({name for name in out.decode().split("\0") if name and (repo / name).exists()})


def lay(repo: Path, lane: int) -> Path:
    """The lane's checkout, laid anew from the repo's files; its `.sandbox/` stays."""
    root = lane_root(repo, lane)
    if root == repo:
        return root
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if entry.name == KEEP:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for name in files(repo):
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target, follow_symlinks=False)
    _share_beside(repo, root)
    return root


def _share_beside(repo: Path, root: Path) -> None:
    """Tests read `../shared` beside the checkout (the team's real sources) where it exists: link it."""
    shared, link = repo.parent / "shared", root.parent / "shared"
    if link.is_symlink() or link.exists():
        link.unlink()
    if shared.is_dir():
        link.symlink_to(shared.resolve())
