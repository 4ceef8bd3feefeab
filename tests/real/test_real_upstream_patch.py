"""The SM75 patch set against each supported upstream release's real wheel: every hunk applies, every image as recorded.

Real sources, no stand-ins: PyPI's wheel of each supported release, the default 0.26.0 and 0.27.1 (pip download,
--no-deps, cached under ~/.cache/vllm-rig-sandbox/upstream/) and the owner's patch at its commit, fetched as a
deploy fetches it: its raw URL with the default git_mirror_prefix in front (vllm_rig/known/sm75_patch.py). A patch
file is used only when its size, sha256 and git blob are the recorded ones; a copy already in the cache (named by
its sha256) is used without the network. Where neither the network nor the cache has it, the patch tests skip
saying so; the wheel tests still run (they need PyPI, as tests/real/test_real_resolver.py does).

What it shows, per release: the wheel is the table's file (size, sha256, METADATA pins); its 9 files are the recorded
pre-images; the whole patch passes `git apply --check`, each hunk alone applies to the wheel's own file, and the
patched files are the recorded post-images; the re-insert anchor of the owner's script is in the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.known import sm75_patch, upstream_releases

CACHE = Path.home() / ".cache" / "vllm-rig-sandbox" / "upstream"
SUPPORTED = upstream_releases.supported_versions()


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


@pytest.fixture(scope="module", params=SUPPORTED)
def release(request: pytest.FixtureRequest) -> upstream_releases.Release:
    return upstream_releases.release(request.param)


@pytest.fixture(scope="module")
def wheel(release: upstream_releases.Release) -> Path:
    path = CACHE / "wheels" / release.wheel
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:"]
        cmd += ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.12", "-d", str(path.parent)]
        proc = subprocess.run([*cmd, f"vllm=={release.version}"], capture_output=True, text=True, env=_clean_env())
        assert proc.returncode == 0, f"pip could not download vllm=={release.version}:\n{proc.stderr[-2000:]}"
    return path


def _fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return bytes(response.read())
    except (urllib.error.URLError, TimeoutError, OSError):
        return None


@pytest.fixture(scope="module")
def patch() -> bytes:
    facts = sm75_patch.VLLM_PATCH
    cached = CACHE / "sources" / facts.sha256
    if cached.is_file():
        return cached.read_bytes()
    url = facts.url(profile_data()["git_mirror_prefix"])
    data = _fetch(url)
    if data is None:
        pytest.skip(f"the patch is neither cached ({cached}) nor reachable at {url}")
    assert (len(data), hashlib.sha256(data).hexdigest()) == (facts.size, facts.sha256), f"{url} is not the patch"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return data


@pytest.fixture()
def tree(wheel: Path, tmp_path: Path) -> Path:
    """The 9 patched files, as the wheel holds them, in a fresh directory."""
    with zipfile.ZipFile(wheel) as z:
        for f in sm75_patch.VLLM_PATCH.files:
            z.extract(f.path, tmp_path)
    return tmp_path


def _git_apply(cwd: Path, patch: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", "apply", *args, "-"], cwd=cwd, input=patch.decode(), capture_output=True, text=True, check=False
    )
    return proc


def split_hunks(patch: bytes) -> list[tuple[str, str, bytes]]:
    """(file, hunk header, a patch of that one hunk) for every hunk, in order."""
    out: list[tuple[str, str, bytes]] = []
    for section in re.split(rb"(?m)^(?=diff --git )", patch):
        if not section:
            continue
        head, *hunks = re.split(rb"(?m)^(?=@@ )", section)
        path = re.match(rb"diff --git a/(\S+)", head)
        assert path is not None
        for hunk in hunks:
            header = hunk.split(b" @@", 1)[0].decode() + " @@"
            out.append((path.group(1).decode(), header, head + hunk))
    return out


def test_the_default_release_is_among_those_checked() -> None:
    assert upstream_releases.DEFAULT in SUPPORTED


def test_the_wheel_is_the_tables_file_with_its_pins(release: upstream_releases.Release, wheel: Path) -> None:
    data = wheel.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (release.size, release.sha256)
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"vllm-{release.version}.dist-info/METADATA").decode()
    requires = set(re.findall(r"^Requires-Dist: (\S+)$", meta, re.M))
    assert {f"torch=={release.torch}", f"flashinfer-python=={release.flashinfer}", f"tilelang=={release.tilelang}"} <= (
        requires
    )
    assert f"Requires-Python: {release.requires_python}" in meta


def test_the_wheels_files_are_the_recorded_pre_images(release: upstream_releases.Release, tree: Path) -> None:
    got = [(f.path, git_blob((tree / f.path).read_bytes())) for f in sm75_patch.VLLM_PATCH.files]
    assert got == [(path, before) for path, before, _ in release.files]
    anchor = (tree / sm75_patch.REINSERT_FILE).read_text()
    assert sm75_patch.REINSERT_ANCHOR in anchor


def test_the_patch_is_the_recorded_file(patch: bytes) -> None:
    facts = sm75_patch.VLLM_PATCH
    assert (len(patch), hashlib.sha256(patch).hexdigest(), git_blob(patch)) == (facts.size, facts.sha256, facts.blob)
    hunks = split_hunks(patch)
    assert [(p, h) for p, h, _ in hunks] == [(f.path, h) for f in facts.files for h in f.hunks]
    pre_post = re.findall(rb"(?m)^index ([0-9a-f]+)\.\.([0-9a-f]+)", patch)
    for f, (pre, post) in zip(facts.files, pre_post, strict=True):
        assert f.pre_blob.startswith(pre.decode()) and f.post_blob.startswith(post.decode()), f.path


def test_every_hunk_applies_alone_to_the_wheels_own_file(patch: bytes, tree: Path) -> None:
    refused = []
    for path, header, one in split_hunks(patch):
        proc = _git_apply(tree, one, "--check")
        if proc.returncode != 0:
            refused.append(f"{path} {header}: {proc.stderr.strip()}")
    assert refused == [], "\n".join(refused)


def test_the_whole_patch_applies_and_gives_the_recorded_post_images(
    release: upstream_releases.Release, patch: bytes, tree: Path
) -> None:
    assert release.patch == "clean"
    proc = _git_apply(tree, patch, "--check")
    assert proc.returncode == 0, proc.stderr
    proc = _git_apply(tree, patch)
    assert proc.returncode == 0, proc.stderr
    got = [(f.path, git_blob((tree / f.path).read_bytes())) for f in sm75_patch.VLLM_PATCH.files]
    assert got == [(path, after) for path, _, after in release.files]
    patched = (tree / "vllm/config/reasoning.py").read_text()
    assert "default_thinking_token_budget: int | None = None" in patched
    assert "capability >= DeviceCapability(7, 5)" in (tree / "vllm/v1/attention/backends/flashinfer.py").read_text()
    assert not list(tree.rglob("*.rej"))
