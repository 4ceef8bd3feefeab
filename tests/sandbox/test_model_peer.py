"""The peer path of vllm_rig/host/model_fetch.py: a follower fetches from another rig's model_serve.py (both run
from the host zip, over real HTTP on loopback) and checks every file against the plan it resolved from the HF
mirror stand-in; a peer that cannot be used is said in one line and the mirror (huggingface_hub) serves the rest.
"""

from __future__ import annotations

import http.client
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
from vllm_rig.host.model_serve import follower_token

served, mirror, box = base.served, base.mirror, base.box  # the mirror stand-in and a fresh host, as there

TOKEN = "peer-token-" + "x" * 24  # the run's, in rig1's token file
FOLLOWER = follower_token(TOKEN, "rig2")  # what rig2's token file holds
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


def start_serving(
    dest: Path,
    tmp: Path,
    status_file: Path | None = None,
    token: str = TOKEN,
    followers: str = "rig2",
    idle_exit_s: float | None = None,
) -> Peer:
    port, log = free_port(), tmp / "serve.log"
    argv = [*host_scripts.program("model_serve"), "--dest", str(dest), "--repo", REPO, "--revision", "main"]
    argv += ["--bind", "127.0.0.1", "--port", str(port), "--followers", followers]
    argv += ["--status-file", str(status_file)] if status_file else []
    argv += ["--idle-exit-s", str(idle_exit_s), "--first-ask-s", str(idle_exit_s)] if idle_exit_s is not None else []
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
        if p.proc.poll() is None:
            p.proc.terminate()
        p.proc.wait(10)


def serve(peer_of: list[Peer], dest: Path, tmp: Path, **kw: object) -> Peer:
    p = start_serving(dest, tmp, **kw)  # type: ignore[arg-type]
    peer_of.append(p)
    return p


def follow(mirror: Mirror, box: Box, spec: str, *extra: str, token: str = FOLLOWER) -> subprocess.CompletedProcess[str]:
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
    part = box.models / ".model.peer" / ".parts" / f"{BIG_SHARD}.part"
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
    assert FOLLOWER not in result.stdout + result.stderr + json.dumps(box.status())


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


def ask(peer: Peer, token: str, method: str = "GET", path: str = "/v1/status") -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", peer.port, timeout=10)
    conn.request(method, path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    return response.status, json.loads(response.read() or b"{}")


def stopped(peer: Peer, within_s: float) -> str:
    """The server's own last line once it exited by itself (rc 0) within `within_s`."""
    rc = peer.proc.wait(within_s)
    assert rc == 0, peer.sent()
    assert peer.proc.stdout is not None
    return peer.proc.stdout.read().decode().strip().splitlines()[-1]


def test_the_server_stops_once_its_only_follower_is_done_and_its_token_is_worthless_after(
    mirror: Mirror, box: Box, holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    """Issue 23: a run's peer server kept listening with that run's token for hours after the run."""
    peer = serve(peer_of, holder.dest, tmp_path)
    assert ask(peer, TOKEN)[0] == 401  # the run's token itself is never a follower's: it is not accepted
    result = follow(mirror, box, peer.spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert assert_complete(box, mirror)["from_peer"]["files"] == len(digests(source()))
    assert stopped(peer, 15) == "model_serve: stopped: every follower (rig2) reported done"
    assert "rig2 is done with this peer; waiting for nobody" in peer.sent()
    with pytest.raises(OSError):
        ask(peer, FOLLOWER)  # nothing listens any more


def test_each_follower_has_its_own_token_refused_once_it_is_done(
    holder: Box, peer_of: list[Peer], tmp_path: Path
) -> None:
    peer = serve(peer_of, holder.dest, tmp_path, followers="rig2,rig3")
    rig3 = follower_token(TOKEN, "rig3")
    assert ask(peer, FOLLOWER)[0] == 200 and ask(peer, rig3)[0] == 200
    assert ask(peer, follower_token(TOKEN, "rig4"))[0] == 401  # not a follower of this server
    assert ask(peer, follower_token("another-runs-token-" + "y" * 20, "rig2"))[0] == 401  # another run's
    assert ask(peer, FOLLOWER, "POST", "/v1/done") == (200, {"state": "done", "waiting_for": ["rig3"]})
    assert ask(peer, FOLLOWER) == (401, {"state": "refused", "message": "this follower reported done"})
    assert ask(peer, rig3)[0] == 200 and peer.proc.poll() is None  # rig3 still needs it
    assert ask(peer, rig3, "POST", "/v1/done")[0] == 200
    assert stopped(peer, 10) == "model_serve: stopped: every follower (rig2, rig3) reported done"


def test_the_server_stops_when_no_follower_asks_for_a_while(holder: Box, peer_of: list[Peer], tmp_path: Path) -> None:
    """An interrupted run: its followers never come or never say they are done; the server does not wait for
    its unit's RuntimeMaxSec. Asking is not idle (a file in flight is not either: tests/unit/test_model_peers.py)."""
    peer = serve(peer_of, holder.dest, tmp_path, idle_exit_s=3)
    for _ in range(3):  # a follower polling every 2 s keeps it up past its idle time
        time.sleep(2)
        assert ask(peer, FOLLOWER)[0] == 200
    assert peer.proc.poll() is None
    started = time.monotonic()
    assert stopped(peer, 15) == "model_serve: stopped: no follower asked for 3 s"
    assert time.monotonic() - started < 10
