"""The peer path of vllm_rig/host/model_fetch.py: a follower fetches from another rig's model_serve.py (both run
from the host zip, over real HTTP on loopback) and checks every file against the plan it resolved from the HF
mirror stand-in; a peer that cannot be used is said in one line and the mirror (real `hf` client) serves the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import host_scripts
from tests.sandbox import test_model_fetch as base
from tests.sandbox.test_model_fetch import (
    BIG_SHARD,
    MARKER,
    MIB,
    REPO,
    Box,
    Mirror,
    assert_complete,
    digests,
    fetch,
    source,
)

served, mirror, box = base.served, base.mirror, base.box  # the mirror stand-in and a fresh host, as there

TOKEN = "peer-token-" + "x" * 24
UNUSED = "model peer rig1 not used: "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Peer:
    """rig1: a model dir that model_serve.py serves, with its request log."""

    dest: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def spec(self) -> str:
        return f"rig1=http://127.0.0.1:{self.port}"

    def sent(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module")
def holder(served: Mirror, tmp_path_factory: pytest.TempPathFactory) -> Box:
    """A host that fetched the model from the mirror (verified, with its marker)."""
    held = Box(tmp_path_factory.mktemp("rig1"))
    result = fetch(served, held)
    assert result.returncode == 0, result.stderr
    return held


def start_serving(dest: Path, tmp: Path, status_file: Path | None = None, token: str = TOKEN) -> Peer:
    port, log = free_port(), tmp / "serve.log"
    argv = [*host_scripts.program("model_serve"), "--dest", str(dest), "--repo", REPO, "--revision", "main"]
    argv += ["--bind", "127.0.0.1", "--port", str(port)]
    argv += ["--status-file", str(status_file)] if status_file else []
    with log.open("wb") as err:
        env = {**os.environ, "VLLM_RIG_PEER_TOKEN": token}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err)
    assert proc.stdout is not None and b"serving" in proc.stdout.readline()
    return Peer(dest, port, log, proc)


@pytest.fixture
def peer_of(tmp_path: Path) -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for p in started:
        p.proc.terminate()
        p.proc.wait(10)


def serve(peer_of: list[Peer], dest: Path, tmp: Path, **kw: object) -> Peer:
    p = start_serving(dest, tmp, **kw)  # type: ignore[arg-type]
    peer_of.append(p)
    return p


def follow(mirror: Mirror, box: Box, spec: str, *extra: str, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    return fetch(mirror, box, "--peer", spec, *extra, VLLM_RIG_PEER_TOKEN=token)


def unused_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if UNUSED in line]


def test_every_file_comes_from_the_peer_and_is_checked_against_the_mirrors_plan(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    peer = serve(peer_of, holder.dest, tmp_path)
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    marker = assert_complete(box, mirror)  # sha256 of every file = the mirror's, endpoint recorded
    assert marker["from_peer"] == {"name": "rig1", "files": len(digests(source()))}
    assert mirror.gets() == []  # no file from the mirror; only the plan (model info, tree) came from it
    assert not unused_lines(result)
    assert f"{len(digests(source()))} from model peer rig1" in result.stdout
    assert box.status()["message"].endswith(f"({len(digests(source()))} from model peer rig1)")
    check = subprocess.run(
        [*host_scripts.program("model_fetch"), "check", "--repo", REPO, "--dest", str(box.dest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0 and "from model peer rig1" in check.stdout


def test_a_part_left_by_an_interrupted_peer_download_is_resumed_by_range(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    commit = mirror.commit()
    part = box.models / f"model.partial-{commit[:12]}" / ".cache" / "vllm-rig-peer" / f"{BIG_SHARD}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes((source() / BIG_SHARD).read_bytes()[: 3 * MIB])
    peer = serve(peer_of, holder.dest, tmp_path)
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete(box, mirror)
    size = (source() / BIG_SHARD).stat().st_size
    assert f"sending {BIG_SHARD} bytes {3 * MIB}-{size - 1} of {size}" in peer.sent()
    assert not unused_lines(result)


def test_a_bad_file_from_the_peer_is_refetched_from_the_mirror_with_one_line(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    bad = tmp_path / "rig1-model"
    shutil.copytree(holder.dest.resolve(), bad)
    shard = bad / BIG_SHARD
    shard.chmod(0o644)
    data = bytearray(shard.read_bytes())
    data[12345] ^= 0xFF  # same size, and the peer's marker still lists it: only a hash finds it
    shard.write_bytes(bytes(data))
    peer = serve(peer_of, bad, tmp_path)
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    marker = assert_complete(box, mirror)
    [line] = unused_lines(result)
    assert f"{BIG_SHARD} (hash)" in line and line.endswith(f"fetching from {mirror.url} instead")
    assert [g["path"].rsplit("/", 1)[1] for g in mirror.gets()] == [BIG_SHARD]
    assert marker["from_peer"] == {"name": "rig1", "files": len(digests(source())) - 1}


def test_a_peer_that_refuses_the_token_falls_back_with_one_line(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    peer = serve(peer_of, holder.dest, tmp_path, token="another-runs-token-" + "y" * 20)
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert unused_lines(result) == [
        f"model_fetch: {UNUSED}it refused this run's token; fetching from {mirror.url} instead"
    ]
    assert assert_complete(box, mirror)["from_peer"] is None
    assert "model_fetch: " + box.status()["peer_unused"] == unused_lines(result)[0]  # the deploy prints this
    assert TOKEN not in result.stdout + result.stderr + json.dumps(box.status())


def test_an_unreachable_peer_falls_back_with_one_line(mirror: Mirror, box: Box) -> None:
    started = time.monotonic()
    result = follow(mirror, box, f"rig1=http://127.0.0.1:{free_port()}", "--peer-wait-s", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = unused_lines(result)
    assert "not reachable at http://127.0.0.1:" in line and line.endswith(f"fetching from {mirror.url} instead")
    assert assert_complete(box, mirror)["from_peer"] is None
    assert time.monotonic() - started < 60


def test_the_follower_waits_while_the_peer_still_downloads(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    later = tmp_path / "rig1" / "model"  # not there yet: the peer answers "not yet"
    later.parent.mkdir()
    peer = serve(peer_of, later, tmp_path)
    timer = threading.Timer(4.0, lambda: later.symlink_to(holder.dest.resolve()))
    timer.start()
    try:
        result = follow(mirror, box, peer.spec)
    finally:
        timer.cancel()
    assert result.returncode == 0, result.stdout + result.stderr
    assert assert_complete(box, mirror)["from_peer"]["files"] == len(digests(source()))
    assert not unused_lines(result) and mirror.gets() == []


def test_a_peer_whose_own_download_failed_is_left_at_once(
    mirror: Mirror, box: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    status = tmp_path / "rig1-fetch.json"
    peer = serve(peer_of, tmp_path / "nothing", tmp_path, status_file=status)
    status.write_text(json.dumps({"exit_code": 2, "message": "could not reach the mirror"}))
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = unused_lines(result)
    assert "it answered HTTP 410: could not reach the mirror" in line
    assert (box.dest / MARKER).is_file()
