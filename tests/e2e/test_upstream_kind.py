"""The upstream runtime kind on the sandbox (issue 27): vLLM's release wheel with the SM75 patch on rig1, the
weicj fork on rig2 (the qwen38 profile), both from a fresh box to a proven service in one pyinfra run.

rig1 gets `runtime_kind: upstream` as host data (inventory/sandbox.py reads VLLM_RIG_SANDBOX_HOST_DATA), as a
real inventory would give one host its own kind. The stand-ins are tests/sandbox/fixtures/pkg_index/upstream.py's
(tests/STANDIN_SOURCES.md, "upstream kind"). Brings rig2 up beside rig1 and takes it down at the end.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import deploy, fresh, unit_span
from tests.sandbox import machine
from tests.sandbox.__main__ import up
from tests.sandbox.fixtures import pkg_index
from tests.sandbox.fixtures.pkg_index import simple, upstream, wheelfile
from tests.systemd_split import parse_env_file
from vllm_rig.paths import LOG_DIR

pytestmark = pytest.mark.sandbox
UPSTREAM = {"rig1": {"runtime_kind": "upstream"}}
BUILD_UNIT = "vllm-rig-build-*"
# The SM75 patch's GDN line (0.27.1 qwen_gdn_linear_attn.py:136-155, the patch's name "FlashQLA legacy (SM70/SM75)").
FLASHQLA_LINE = "Using FlashQLA legacy (SM70/SM75) GDN prefill kernel (requested=flashqla_legacy, head_k_dim="


@pytest.fixture(scope="module")
def two_kinds(rig: Rig) -> Iterator[Rig]:
    up(2)
    both = Rig(machine.machines(2), rig.inventory, rig.key, rig.fileserver, rig.started)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_RIG_SANDBOX_HOST_DATA", json.dumps(UPSTREAM))
        try:
            yield both
        finally:
            machine.down(machine.Machine("rig2"))


@pytest.fixture(scope="module")
def deployed(two_kinds: Rig) -> dict[str, float]:
    """Both hosts fresh, one run of the whole deploy; the runtime stage's wall time of each (its build unit's
    span, as the host's journal has it)."""
    fresh(two_kinds, "rig1")
    fresh(two_kinds, "rig2")
    since = time.time()
    run = deploy(two_kinds, "deploy.py")
    assert run.ok, run.log[-6000:]
    walls = {}
    for name in ("rig1", "rig2"):
        start, end = unit_span(two_kinds, BUILD_UNIT, since, name)
        walls[name] = end - start
    print(
        f"\nruntime stage, same run: upstream wheel (rig1) {walls['rig1']:.1f}s, "
        f"fork compile (rig2, stand-in compile) {walls['rig2']:.1f}s"
    )
    return walls


def _show(rig: Rig, name: str, prop: str) -> str:
    return rig.ssh(name, f"systemctl show vllm -p {prop}")


def _environment(rig: Rig, name: str) -> str:
    """The server's environment as NAME=value words (each followed by a space): the root-only file the unit names."""
    text = rig.ssh(name, "sudo cat /etc/vllm-rig/vllm-environment.env")
    return "".join(f"{k}={v} " for k, v in parse_env_file(text))


def current_build_log(rig: Rig, host: str) -> str:
    """The build log of the runtime `host` serves now."""
    name = rig.ssh(host, "readlink /opt/vllm-rig/current").strip().rsplit("/", 1)[-1]
    return rig.ssh(host, f"sudo cat {LOG_DIR}/build-{name}.log")


def test_fresh_boxes_of_both_kinds_serve_after_one_run(two_kinds: Rig, deployed: dict[str, float]) -> None:
    assert deployed["rig1"] > 0 and deployed["rig2"] > 0
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]
    assert service.models(service.api_key(two_kinds, "rig2"), "rig2") == ["qwen38-27b"]
    record = json.loads(two_kinds.ssh("rig1", "cat /opt/vllm-rig/current/runtime.json"))
    assert record["inputs"]["kind"] == "upstream-wheel" and record["versions"]["vllm"] == upstream.VERSION
    assert "release 13.0" in (record["nvcc"] or "")
    # The build's own log: the wheel and both patches checked and applied, nothing compiled.
    log = current_build_log(two_kinds, "rig1")
    for said in (
        f"vllm-{upstream.VERSION}-py3-none-any.whl matches the known sha256",
        "CUDA toolkit 13.0.3 in the venv",  # torch 2.13.0's
        "SM75 patch applied (sha256 verified)",
        "FlashQLA patch applied (sha256 verified)",
        "the SM75 patch is in place in the installed vLLM",
    ):
        assert said in log, said
    assert "compiling the fork" not in log
    assert "upstream" not in json.dumps(json.loads(two_kinds.ssh("rig2", "cat /opt/vllm-rig/current/runtime.json")))


def test_the_upstream_unit_is_the_first_setups_own(two_kinds: Rig, deployed: dict[str, float]) -> None:
    start, env = _show(two_kinds, "rig1", "ExecStart"), _environment(two_kinds, "rig1")
    assert "--tensor-parallel-size 2 --device-ids 0,1" in start
    assert '"default_thinking_token_budget":4000' in start.replace(" ", "")
    assert "CUDA_VISIBLE_DEVICES" not in env and "VLLM_DEFAULT_THINKING_TOKEN_BUDGET" not in env
    assert "CUDA_HOME=/opt/vllm-rig/current/venv/lib/python3.11/site-packages/nvidia/cu13" in env
    assert "WorkingDirectory=/opt/vllm-rig/current" in _show(two_kinds, "rig1", "WorkingDirectory")
    # What the patched release made of that line at start, by the service's own journal.
    journal = two_kinds.ssh("rig1", "sudo journalctl -b -u vllm.service -o cat")
    assert "Using FLASHINFER attention backend" in journal
    assert FLASHQLA_LINE in journal
    assert "Unknown vLLM environment variable detected" not in journal
    # The fork's unit on rig2 keeps the fork's way of choosing GPUs (the qwen38 profile sets no budget).
    assert "--device-ids" not in _show(two_kinds, "rig2", "ExecStart")


def test_each_host_serves_its_profiles_flags(two_kinds: Rig, deployed: dict[str, float]) -> None:
    first, second = _show(two_kinds, "rig1", "ExecStart"), _show(two_kinds, "rig2", "ExecStart")
    assert "--max-model-len 100000" in first  # the rest of it: test_the_upstream_unit_is_the_first_setups_own
    assert "--max-model-len 131072" in second and "--tool-call-parser qwen3_xml" in second
    assert "--kv-cache-dtype" not in second  # the qwen38 profile's FP16 KV cache
    limits = two_kinds.ssh("rig2", "nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits").split()
    assert limits == ["175.00", "175.00"]


def test_a_second_run_changes_nothing_on_either_host(two_kinds: Rig, deployed: dict[str, float]) -> None:
    again = deploy(two_kinds, "deploy.py")
    assert again.ok and again.changed == [], again.changed


@pytest.fixture
def hostile_wheel() -> Iterator[str]:
    """The main index serves other bytes under the release wheel's own file name and version, and names their sha256
    on its page as an index would: a hostile index, or anyone on the way. The hash lock (locks_dir, written for this
    index on the first deploy) holds the release wheel's sha256 only."""
    page = pkg_index.SIMPLE / "vllm" / "index.html"
    before = page.read_text()
    original = pkg_index.manifest()["upstream"]["vllm_wheel"]
    dist = upstream.vllm_dist()
    dist = dataclasses.replace(dist, files={**dist.files, "vllm/_hostile.py": b"print('not the release')\n"})
    data = wheelfile.build(dist)
    served = pkg_index.SIMPLE / "vllm" / original["filename"]
    kept = served.with_name(served.name + ".release")
    served.replace(kept)  # the release's file (it may be a link into the cache) is set aside, not written over
    served.write_bytes(data)
    page.write_text(simple.project_page("vllm", [simple.Entry(served.name, upstream.sha256(data), None, b"")]))
    try:
        yield upstream.sha256(data)
    finally:
        page.write_text(before)
        kept.replace(served)


def test_a_hostile_wheel_is_refused_and_the_last_runtime_serves(
    two_kinds: Rig, deployed: dict[str, float], hostile_wheel: str
) -> None:
    current = two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    pid = _show(two_kinds, "rig1", "MainPID")
    run = deploy(two_kinds, "deploy.py", limit="rig1", data={"force_rebuild": True})
    assert not run.ok
    line = run.error_line()
    assert f"vllm=={upstream.VERSION}" in line and hostile_wheel in line and "is not the locked file" in line, line
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current
    assert _show(two_kinds, "rig1", "MainPID") == pid  # the service was not even restarted
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]


# ---- upstream_build compile on the same host: a runtime change like any other (issue 27)

# The sandbox's stand-in source archive is 0.26.0's, whose FlashInfer serves FP16 KV only; its catalogue's FP8-KV
# entries could not be switched to there, so the run leaves them out.
COMPILE = {
    "upstream_build": "compile",
    "vllm_version": upstream.SDIST_VERSION,
    "kv_cache_dtype": "auto",
    "models": {},
}


@pytest.fixture(scope="module")
def compiled(two_kinds: Rig, deployed: dict[str, float]) -> dict[str, object]:
    """rig1, serving the wheel's runtime, told to compile the release instead: one run of the whole deploy. What
    it had before, the build unit's span and the runtime record after."""
    before = two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    since = time.time()
    run = deploy(two_kinds, "deploy.py", limit="rig1", data=COMPILE)
    assert run.ok, run.log[-6000:]
    start, end = unit_span(two_kinds, BUILD_UNIT, since, "rig1")
    print(f"\nruntime stage, upstream compile (rig1, stand-in compile): {end - start:.1f}s")
    record = json.loads(two_kinds.ssh("rig1", "cat /opt/vllm-rig/current/runtime.json"))
    return {"before": before, "record": record, "seconds": end - start}


def test_the_compile_build_replaces_the_wheels_runtime_and_serves(two_kinds: Rig, compiled: dict) -> None:
    record = compiled["record"]
    assert record["inputs"]["kind"] == "upstream-compile" and record["inputs"]["torch_lane"] == "cu128"
    assert record["versions"]["vllm"] == f"{upstream.SDIST_VERSION}+cu129"  # setup.py's name for a CUDA 12.9 build
    assert record["versions"]["torch"] == "2.11.0+cu128" and "release 12.9" in (record["nvcc"] or "")
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/previous").strip() == compiled["before"]  # rollback target
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]
    env = _environment(two_kinds, "rig1")
    assert "CUDA_HOME=/usr/local/cuda-12.9 " in env and "nvidia/cu13" not in env
    assert "--device-ids 0,1" in _show(two_kinds, "rig1", "ExecStart")
    journal = two_kinds.ssh("rig1", "sudo journalctl -b -u vllm.service -o cat")
    last_start = journal.rsplit("Stopped vllm.service", 1)[-1]  # systemd says Started once the server is ready
    assert FLASHQLA_LINE in last_start


def test_the_compile_builds_the_patched_archive_from_local_sources_only(two_kinds: Rig, compiled: dict) -> None:
    log = current_build_log(two_kinds, "rig1")
    for said in (
        f"vllm-{upstream.SDIST_VERSION}.tar.gz matches the known sha256",
        "unpacked, every member checked",
        "SM75 patch applied (sha256 verified)",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
        "FMHA_SM100_SRC_DIR=",
        "TML_FA4_SRC_DIR=",
        "Building CUDA object",  # the stand-in compile's ninja lines
        f"vLLM {upstream.SDIST_VERSION}+cu129 installed from the compiled tree",
        "the SM75 patch is in place in the installed vLLM",
        "FlashQLA patch applied (sha256 verified)",
    ):
        assert said in log, said
    assert "would download" not in log  # no source was left for CMake to fetch


def test_a_second_compile_run_changes_nothing(two_kinds: Rig, compiled: dict) -> None:
    again = deploy(two_kinds, "deploy.py", limit="rig1", data=COMPILE)
    assert again.ok and again.changed == [], again.changed


@pytest.fixture
def hostile_sdist() -> Iterator[str]:
    """The index serves other bytes under the release's archive name (its page's hash updated to match, as an
    index that lies would): only the settings' sha256 stands between them and the compile."""
    built = pkg_index.manifest()["upstream"]["vllm_sdist"]
    path = pkg_index.SIMPLE / "vllm" / built["filename"]
    page = pkg_index.SIMPLE / "vllm" / "index.html"
    original, before = path.read_bytes(), page.read_text()
    hostile = original + b"\0" * 512  # still a gzip stream to tar, but not the release's bytes
    path.write_bytes(hostile)
    page.write_text(before.replace(built["sha256"], upstream.sha256(hostile)))
    try:
        yield upstream.sha256(hostile)
    finally:
        path.write_bytes(original)
        page.write_text(before)


def test_a_hostile_source_archive_is_refused_and_the_last_runtime_serves(
    two_kinds: Rig, compiled: dict, hostile_sdist: str
) -> None:
    current = two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    pid = _show(two_kinds, "rig1", "MainPID")
    run = deploy(two_kinds, "deploy.py", limit="rig1", data={**COMPILE, "force_rebuild": True})
    assert not run.ok
    line = run.error_line()
    assert "source archive" in line and "sha256" in line, line
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current
    assert _show(two_kinds, "rig1", "MainPID") == pid
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]


# ---- a runtime kind switch both ways, then a rollback across kinds (issue 39)

FORK = {"runtime_kind": "fork"}
# Said by the fork when it is started with the upstream kind's unit (its --device-ids, --reasoning-config budget):
# argparse's refusal and systemd's exit line. A switch that restarts the old unit first leaves them in the journal.
OLD_UNIT_REFUSED = ("error: argument", "unrecognized arguments", "INVALIDARGUMENT")


def _start_check(rig: Rig, name: str) -> dict:
    return json.loads(rig.ssh(name, "sudo cat /var/lib/vllm-rig/start-check.json"))


def _proven_since(rig: Rig, name: str, since: float) -> dict:
    """The start check's record of a start proven after `since` (whole seconds), read once the run has ended:
    systemctl's start and restart wait for the unit's start check."""
    result = _start_check(rig, name)
    stamp = datetime.fromisoformat(result["time"].replace("Z", "+00:00")).timestamp()
    assert result["ok"] and stamp >= int(since), result
    return result


def _served_since(rig: Rig, name: str, since: float) -> str:
    journal = rig.ssh(name, f"sudo journalctl --no-pager -o cat --since=@{int(since)} -u vllm")
    for refused in OLD_UNIT_REFUSED:
        assert refused not in journal, (refused, journal[-3000:])
    return journal


def _kind(rig: Rig, name: str) -> str:
    """The runtime record's kind; the fork's record names none (only the upstream kind's builds write one)."""
    return json.loads(rig.ssh(name, "cat /opt/vllm-rig/current/runtime.json"))["inputs"].get("kind", "fork")


REFUSED_FLAG = "--seed=not-a-number"  # the fork's server exits at start: argparse's "invalid int value"


@pytest.fixture(scope="module")
def refused_switch(two_kinds: Rig, compiled: dict) -> dict[str, object]:
    """rig1, serving the upstream kind's compiled runtime, told to switch to the fork with a flag the fork's server
    refuses: the fork is built and switched to, and its first start fails."""
    before = two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    since = time.time()
    run = deploy(two_kinds, "deploy.py", limit="rig1", data={**FORK, "vllm_extra_args": [REFUSED_FLAG]})
    return {"run": run, "before": before, "since": since}


def test_a_new_runtime_whose_server_exits_at_start_leaves_the_runtime_before_serving(
    two_kinds: Rig, refused_switch: dict
) -> None:
    run = refused_switch["run"]
    assert run.rc != 0 and "[rig1] Error: " in run.log, run.log[-3000:]
    line = next((x for x in run.log.splitlines() if "never served: rolled back to runtime" in x), run.error_line())
    assert "argument --seed: invalid int value: 'not-a-number'" in line, line  # the server's own words
    assert "which serves again with the unit and environment it served with (start check passed)" in line, line
    # The upstream kind's runtime serves again with its own unit, proven; the fork it left is not marked rolled back.
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == refused_switch["before"]
    assert _kind(two_kinds, "rig1") == "upstream-compile"
    assert "--seed" not in _show(two_kinds, "rig1", "ExecStart")
    assert two_kinds.ssh("rig1", "systemctl is-active vllm", check=False).strip() == "active"
    _proven_since(two_kinds, "rig1", refused_switch["since"])
    assert two_kinds.ssh("rig1", "ls /opt/vllm-rig/previous/rolled-back 2>/dev/null || true").strip() == ""


@pytest.fixture(scope="module")
def to_fork(two_kinds: Rig, refused_switch: dict) -> dict[str, object]:
    """rig1, serving the upstream kind's compiled runtime, switched to the fork with the setting fixed: one run of
    the whole deploy (the fork the refused run built is switched to again, not built anew)."""
    before = two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    since = time.time()
    run = deploy(two_kinds, "deploy.py", limit="rig1", data=FORK)
    assert run.ok, run.log[-6000:]
    start, end = unit_span(two_kinds, BUILD_UNIT, refused_switch["since"], "rig1")
    print(f"\nkind switch upstream -> fork on rig1: fork build (stand-in compile) {end - start:.1f}s")
    return {"before": before, "since": since}


def test_a_switch_to_the_fork_starts_the_fork_once_with_its_own_unit(two_kinds: Rig, to_fork: dict) -> None:
    assert _kind(two_kinds, "rig1") == "fork"
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/previous").strip() == to_fork["before"]
    _proven_since(two_kinds, "rig1", to_fork["since"])
    journal = _served_since(two_kinds, "rig1", to_fork["since"])  # the old unit never started the fork
    start = _show(two_kinds, "rig1", "ExecStart")
    assert "--device-ids" not in start and "default_thinking_token_budget" not in start.replace(" ", "")
    assert "--device-ids" not in journal.rsplit("non-default args", 1)[-1].split("\n", 1)[0]
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]


@pytest.fixture(scope="module")
def back_to_upstream(two_kinds: Rig, to_fork: dict) -> float:
    """rig1 told the upstream kind's compile again: its runtime is `previous`, switched back to without a build."""
    since = time.time()
    run = deploy(two_kinds, "deploy.py", limit="rig1", data=COMPILE)
    assert run.ok, run.log[-6000:]
    return since


def test_a_switch_back_to_upstream_builds_nothing_and_is_proven(
    two_kinds: Rig, to_fork: dict, back_to_upstream: float
) -> None:
    assert two_kinds.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == to_fork["before"]
    assert _kind(two_kinds, "rig1") == "upstream-compile"
    with pytest.raises(LookupError):
        unit_span(two_kinds, BUILD_UNIT, back_to_upstream, "rig1")  # no build ran
    _proven_since(two_kinds, "rig1", back_to_upstream)
    _served_since(two_kinds, "rig1", back_to_upstream)
    assert "--device-ids 0,1" in _show(two_kinds, "rig1", "ExecStart")
    assert "CUDA_HOME=/usr/local/cuda-12.9 " in _environment(two_kinds, "rig1")


def test_a_rollback_across_kinds_restarts_with_the_unit_that_runtime_served_with(
    two_kinds: Rig, back_to_upstream: float
) -> None:
    since = time.time()
    run = deploy(two_kinds, "tasks/rollback.py", limit="rig1", data=COMPILE)
    assert run.ok, run.log[-4000:]
    assert "the unit and environment" in run.log and "served with are back in place" in run.log, run.log[-3000:]
    assert _kind(two_kinds, "rig1") == "fork"
    _proven_since(two_kinds, "rig1", since)
    _served_since(two_kinds, "rig1", since)
    start = _show(two_kinds, "rig1", "ExecStart")
    assert "--device-ids" not in start and "default_thinking_token_budget" not in start.replace(" ", "")
    assert "nvidia/cu13" not in _environment(two_kinds, "rig1")
    assert service.models(service.api_key(two_kinds, "rig1"), "rig1") == ["qwen-local"]
