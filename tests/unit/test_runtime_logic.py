"""Runtime-stage decisions that need no host: fingerprints, MAX_JOBS, which runtime directory, the build
spec, the facts' parsers, and the operations planned on a fake host."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.core.git import checkout_matches
from vllm_rig.known.git_tags import SHA40
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import plan as runtime
from vllm_rig.stages.runtime.facts import (
    LoadedHost,
    LogProgress,
    ServiceStart,
    parse_build_state,
    parse_runtime_state,
    restart_needed,
)
from vllm_rig.stages.runtime.kinds import fork
from vllm_rig.stages.runtime.lanes import torch_lane
from vllm_rig.stages.runtime.operations import _worth_showing, start_command
from vllm_rig.validation import load_settings

FP = "ab" * 32


def _settings(**changes: Any) -> Settings:
    """The fork kind's plan (the upstream kind's: tests/unit/test_upstream_unit.py)."""
    return load_settings({**profile_data(), "runtime_kind": "fork", **changes})


def _fp(**changes: Any) -> str:
    return runtime.fingerprint(runtime.build_inputs(_settings(**changes)))


# ---- fingerprint -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"fork_ref": "1" * 40},
        {"flashqla_ref": "2" * 40},
        {"cutlass_ref": "4" * 40},
        {"triton_src_ref": "6" * 40},
        {"torch_version": "2.11.1"},
        {"triton_version": "3.6.1"},
        {"transformers_version": "5.12.2"},
        {"numpy_version": "2.3.6"},
        {"python_version": "3.11"},
        {"cuda_version": "12.8"},
        {"gpu_compute_capability": "7.0"},
        {"flashinfer_version": "0.6.8.post1"},
        {"torch_index_url": "https://download.pytorch.org/whl/cu130"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_build_input_changes_the_fingerprint(change: dict[str, Any]) -> None:
    assert _fp(**change) != _fp()


def test_changed_patch_hashes_change_the_fingerprint() -> None:
    patches = profile_data()["flashinfer_sm75_patches"]
    altered = {
        **patches,
        "0.6.14": {
            **patches["0.6.14"],
            "files": {
                "include/x.cuh": {"url": "https://m.example/include/x.cuh", "before": "a" * 64, "after": "b" * 64}
            },
        },
    }
    pr3621 = {
        "flashinfer_version": "0.6.14",
        "kv_cache_dtype": "auto",
        "models": {},
    }  # the release PR 3621 fixes, FP16 KV
    assert _fp(**pr3621, flashinfer_sm75_patches=altered) != _fp(**pr3621)


def test_sources_and_mirrors_do_not_change_the_fingerprint() -> None:
    """The same pins from elsewhere are the same build: no rebuild for a mirror switch."""
    patches = profile_data()["flashinfer_sm75_patches"]
    moved = {
        v: {**e, "files": {p: {**f, "url": f"https://mirror.example/other/{p}"} for p, f in e["files"].items()}}
        for v, e in patches.items()
    }
    same = _fp(
        pip_index_url="https://pypi.mirror.example/simple/",
        torch_index_url="https://mirror.example/pytorch-wheels/cu128",
        git_mirror_prefix="https://gh-proxy.example/",
        fork_repo="https://gitee.example/weicj/vLLM-2080Ti-Definitive.git",
        flashinfer_sm75_patches=moved,
        build_max_jobs=3,
        build_timeout_s=600,
    )
    assert same == _fp()


def test_torch_lane_comes_from_the_index_url() -> None:
    assert torch_lane("https://download.pytorch.org/whl/cu128") == "cu128"
    assert torch_lane("http://127.0.0.1:18081/whl/cu128/") == "cu128"
    assert torch_lane("https://example/simple/") == "https://example/simple/"


# ---- MAX_JOBS -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "threads", "ram", "jobs"),
    [
        ("auto", 2, 23.5, 2),  # the sandbox: threads bound it
        ("auto", 16, 24.0, 7),  # (24 - 3) / 3
        ("auto", 32, 128.0, 8),  # the fork's cap
        ("auto", 8, 16.0, 4),  # (16 - 3) // 3
        ("auto", 4, 4.0, 1),  # never 0
        (6, 64, 256.0, 6),  # a number is used as it is
    ],
)
def test_max_jobs(setting: int | str, threads: int, ram: float, jobs: int) -> None:
    assert runtime.max_jobs(setting, threads, ram) == jobs


# ---- which runtime ----------------------------------------------------------------------------------


def _state(current: str | None = None, **runtimes: dict[str, Any]) -> dict[str, Any]:
    base = {"fingerprint": FP, "complete": True, "rolled_back": False, "building": False}
    return {
        "current": current,
        "previous": None,
        "runtimes": {n.replace("_", "-"): {**base, **r} for n, r in runtimes.items()},
    }


NAME = FP[:16]


def test_first_build_gets_the_fingerprint_name() -> None:
    assert runtime.choose(FP, _state(), force=False) == runtime.Choice(NAME, "build")


def test_current_runtime_is_kept() -> None:
    state = _state(NAME, **{NAME: {}})
    assert runtime.choose(FP, state, force=False) == runtime.Choice(NAME, "keep")


def test_a_complete_runtime_of_these_settings_is_switched_to() -> None:
    state = _state("other", other={"fingerprint": "cd" * 32}, **{NAME: {}})
    assert runtime.choose(FP, state, force=False) == runtime.Choice(NAME, "switch")


def test_an_unfinished_build_is_resumed_not_started_beside() -> None:
    state = _state("other", other={"fingerprint": "cd" * 32}, **{NAME: {"complete": False}})
    assert runtime.choose(FP, state, force=False) == runtime.Choice(NAME, "build")


def test_force_builds_beside_the_current_one_and_resumes_its_own_unfinished_build() -> None:
    state = _state(NAME, **{NAME: {}})
    assert runtime.choose(FP, state, force=True) == runtime.Choice(f"{NAME}-2", "build")
    state["runtimes"][f"{NAME}-2"] = {"fingerprint": FP, "complete": False}
    assert runtime.choose(FP, state, force=True) == runtime.Choice(f"{NAME}-2", "build")
    state["runtimes"][f"{NAME}-2"]["complete"] = True
    state["current"] = f"{NAME}-2"
    assert runtime.choose(FP, state, force=False) == runtime.Choice(f"{NAME}-2", "keep")
    assert runtime.choose(FP, state, force=True) == runtime.Choice(f"{NAME}-3", "build")


def test_a_rolled_back_runtime_is_not_switched_to_again() -> None:
    state = _state("other", other={"fingerprint": "cd" * 32}, **{NAME: {"rolled_back": True}})
    assert runtime.choose(FP, state, force=False) == runtime.Choice(NAME, "rolled-back")
    assert runtime.choose(FP, state, force=True) == runtime.Choice(f"{NAME}-2", "build")


def test_a_directory_of_another_fingerprint_is_never_reused() -> None:
    state = _state(None, **{NAME: {"fingerprint": "cd" * 32}})  # (a 16-digit prefix clash)
    assert runtime.choose(FP, state, force=False) == runtime.Choice(f"{NAME}-2", "build")


def test_rolled_back_message_says_what_differs() -> None:
    differences = runtime.input_differences({"fork": "a", "numpy": "2"}, {"fork": "b", "numpy": "2"})
    assert differences == ["fork: a / b"]
    message = runtime.rolled_back_problem(NAME, "/opt/vllm-rig", differences)
    assert "fork: a / b" in message and "force_rebuild=true" in message and f"{NAME}/rolled-back" in message


# ---- the build spec ----------------------------------------------------------------------------------


def test_spec_carries_pins_sources_and_the_mirrored_fix() -> None:
    pr3621 = {"flashinfer_version": "0.6.14", "kv_cache_dtype": "auto", "models": {}}  # FP16 KV only
    s = _settings(git_mirror_prefix="https://gh-proxy.example/", **pr3621)
    inputs = runtime.build_inputs(s)
    dirs = runtime.RuntimeDirs(s.install_root, "x")
    spec = runtime.build_spec(s, dirs, FP, inputs, 5)
    assert spec["pins"] == {
        "torch": "2.11.0",
        "torchvision": "0.26.0",
        "torchaudio": "2.11.0",
        "triton": "3.6.0",
        "transformers": "5.12.1",
        "numpy": "2.3.5",
        "flashinfer-python": "0.6.14",
    }
    assert spec["torch_packages"] == ["torch", "torchvision", "torchaudio", "triton"]
    assert spec["overrides"] == {"nvidia-cutlass-dsl": "==4.5.2"}
    assert spec["replace"] == ["flashinfer-python", "nvidia-cutlass-dsl"]
    assert spec["drop"] == ["flashinfer-cubin", "flashinfer-jit-cache"]
    assert spec["validate_waive"] == ["flashinfer-cubin", "flashinfer_cubin"]  # the fork's check wants a dropped one
    assert spec["kind"] == "fork" and spec["torch_index_url"] == s.torch_index_url  # the lock's extra index too
    prefill = spec["flashinfer_fix"]["files"]["include/flashinfer/attention/prefill.cuh"]
    assert prefill["url"] == (
        "https://gh-proxy.example/https://raw.githubusercontent.com/flashinfer-ai/flashinfer/"
        "b6691f83a4a4fcbd95da6beb5e57fb8cfd716df4/include/flashinfer/attention/prefill.cuh"
    )
    assert prefill["before"].startswith("9bb66eea") and prefill["after"].startswith("3cda6a4f")
    assert spec["flashinfer_fix"]["patch"] == "pr3621"
    assert spec["max_jobs"] == 5 and spec["arch_list"] == "7.5" and spec["python"] == "python3.12"
    assert spec["sources"]["cutlass"] == "/opt/vllm-rig/runtimes/x/src/deps/cutlass"
    assert spec["check_script"] == "/opt/vllm-rig/bin/check-flashinfer-pr3621-sm75.sh"


def test_the_forks_own_pin_needs_no_fix() -> None:
    s = _settings(flashinfer_version="0.6.8.post1")
    assert runtime.build_inputs(s)["flashinfer_fix"] is None
    assert runtime.build_inputs(s)["requirement_overrides"] == {}
    assert runtime.build_spec(s, runtime.RuntimeDirs("/r", "x"), FP, {}, 1)["flashinfer_fix"] is None


def test_git_sources_take_the_mirror_prefix_and_cache_names_ignore_it() -> None:
    s = _settings(git_mirror_prefix="https://gh-proxy.example/")
    sources = runtime.git_sources(s, runtime.RuntimeDirs("/r", "x"))
    fetched = [e["ref"] for _, e in sorted(s.fetchcontent_sources.items()) if e["min_arch"] is None]
    assert [ref for _, _, ref, _ in sources] == [s.fork_ref, s.flashqla_ref, s.cutlass_ref, s.triton_src_ref, *fetched]
    assert all(url.startswith("https://gh-proxy.example/https://github.com/") for _, url, _, _ in sources)
    assert runtime.cache_name(sources[0][1]) == "weicj+vLLM-2080Ti-Definitive"
    assert runtime.cache_name("http://127.0.0.1:18181/git/NVIDIA/cutlass.git") == "NVIDIA+cutlass"


@pytest.mark.parametrize("profile", [None, "qwen38", "fork_validated"])
def test_every_git_source_a_default_host_checks_out_is_a_commit(profile: str | None) -> None:
    """A moved tag cannot choose the code: whatever a host of each profile checks out (its kind's defaults), it
    names by a 40-hex commit, so the fetch asks the remote for that commit and HEAD is checked against it."""
    s = load_settings(profile_data(profile))
    refs = [ref for _, _, ref, _ in runtime.git_sources(s, runtime.RuntimeDirs("/r", "x"))]
    assert refs and all(SHA40.match(ref) for ref in refs), refs


# ---- facts ---------------------------------------------------------------------------------------------


def test_runtime_state_parses_links_and_runtimes() -> None:
    out = [
        "@@current",
        "/opt/vllm-rig/runtimes/aaa",
        "@@previous",
        "@@runtimes",
        f"aaa\t{FP}\tcomplete\t\tinactive",
        f"bbb\t{FP}\t\trolled-back\tactive",
        "ccc\t\t\t\t",
    ]
    state = parse_runtime_state(out)
    assert state["current"] == "aaa" and state["previous"] is None
    assert state["runtimes"]["aaa"] == {"fingerprint": FP, "complete": True, "rolled_back": False, "building": False}
    assert state["runtimes"]["bbb"] == {"fingerprint": FP, "complete": False, "rolled_back": True, "building": True}
    assert state["runtimes"]["ccc"]["fingerprint"] == ""


def test_build_state_reads_the_unit_and_the_status() -> None:
    out = [
        "@@complete",
        "@@unit",
        "ActiveState=failed",
        "Result=exit-code",
        "InvocationID=abc",
        "@@status",
        '{"state": "failed", "error": "step compile: boom"}',
        "@@others",
        "vllm-rig-build-x.service",
    ]
    state = parse_build_state(out)
    assert not state["complete"] and not state["active"] and state["unit"]["InvocationID"] == "abc"
    assert state["status"]["error"] == "step compile: boom" and state["others"] == ["vllm-rig-build-x.service"]
    assert parse_build_state(["@@complete", "yes", "@@unit", "ActiveState=active", "@@status", "{broken"])["active"]


def test_checkout_matches_only_the_commit_at_head() -> None:
    sha = "f" * 40
    assert checkout_matches({"head": sha}, sha)
    assert not checkout_matches({"head": sha}, "v3.6.0")  # a tag is never "at" anything: it can move
    assert not checkout_matches({"head": None}, sha)


def test_loaded_host_names_kernel_and_driver() -> None:
    out = ["@@kernel", "6.8.0-49-generic", "@@driver", "580.159.03"]
    assert LoadedHost().process(out) == "kernel=6.8.0-49-generic driver=580.159.03"
    assert LoadedHost().process(["@@kernel", "k", "@@driver"]) == "kernel=k driver=none"  # no module loaded


def test_log_progress_counts_whole_lines() -> None:
    out = ["@@log", "42", "==> step 5/6: compile", "  [3/13] Building CUDA object x.o"]
    assert LogProgress().process(out) == {
        "count": 42,
        "lines": ["==> step 5/6: compile", "  [3/13] Building CUDA object x.o"],
    }


def test_progress_shows_steps_in_order_and_only_the_newest_compile_line() -> None:
    lines = ["==> step 5/6: compile", "[1/13] a", "[2/13] b", "==> step 6/6: check", "BUILD OK x"]
    assert _worth_showing(lines, "") == ["==> step 5/6: compile", "[2/13] b", "==> step 6/6: check", "BUILD OK x"]
    assert _worth_showing(["[2/13] b"], "[2/13] b") == []


@pytest.mark.parametrize(
    ("found", "changed", "restart"),
    [
        ({"state": "active", "started": 100}, 200, True),
        ({"state": "activating", "started": 100}, 200, True),
        ({"state": "active", "started": 300}, 200, False),
        ({"state": "inactive", "started": None}, 200, False),
        ({"state": "active", "started": 100}, None, False),
    ],
)
def test_restart_only_a_running_service_older_than_the_last_change(found: dict, changed: int, restart: bool) -> None:
    assert restart_needed(found, changed) is restart


def test_service_start_is_read_as_epoch_seconds() -> None:
    assert ServiceStart().process(["@@state", "active", "@@started", "1764600000"]) == {
        "state": "active",
        "started": 1764600000,
    }
    assert ServiceStart().process(["@@state", "inactive", "@@started"]) == {"state": "inactive", "started": None}


def test_build_unit_outlives_ssh_and_has_its_own_timeout() -> None:
    command = start_command("vllm-rig-build-x.service", "/opt/r/x", "/opt/b.pyz", "/opt/r/x/spec.json", "/l/x.log", 900)
    assert "systemd-run --quiet --unit=vllm-rig-build-x.service" in command
    assert "--property=RuntimeMaxSec=900" in command and "StandardOutput=append:/l/x.log" in command
    assert "systemctl reset-failed vllm-rig-build-x.service" in command  # a failed unit of that name is cleared
    assert re.search(r"/usr/bin/python3 /opt/b.pyz build_runtime /opt/r/x/spec.json$", command)


def test_an_sm75_compile_gets_flash_attention_whatever_the_pinned_cmake_does() -> None:
    """Upstream 0.21.0's vllm_flash_attn.cmake fetches vllm-flash-attn on SM75 too, and a missing source
    ends the build on ninja's "unknown target '_vllm_fa2_C'": the deploy supplies it (DeepGEMM, whose absence
    only warns, stays SM90+). The FetchContent variables reach the compile as the build spec's environment."""
    s = _settings()
    needed = fork.fetchcontent_deps(s)
    assert sorted(needed) == ["flashmla", "qutlass", "vllm-flash-attn"]
    spec = fork.KIND.spec_part(s, runtime.RuntimeDirs("/r", "x"))["fetchcontent"]
    assert spec["vllm-flash-attn"]["env"] == "VLLM_FLASH_ATTN_SRC_DIR"


def test_a_complete_runtime_is_read_once_per_run_a_building_one_each_time() -> None:
    from pyinfra.context import ctx_host

    from vllm_rig.stages.runtime.facts import built_state

    class Box:
        name = "box"

        def __init__(self, output: list[str]) -> None:
            self.found, self.reads = parse_build_state(output), 0

        def get_fact(self, fact: object, **kwargs: object) -> object:
            self.reads += 1
            return self.found

    done = Box(["@@complete", "yes", "@@unit", "ActiveState=inactive"])
    building = Box(["@@complete", "@@unit", "ActiveState=active"])
    for box, reads in ((done, 1), (building, 2)):
        with ctx_host.use(box):
            built_state("/opt/vllm-rig/runtimes/a", "vllm-rig-build-a.service")  # the artifact offer
            built_state("/opt/vllm-rig/runtimes/a", "vllm-rig-build-a.service")  # the build
        assert box.reads == reads


def test_a_host_failed_on_the_build_fact_reads_as_no_build() -> None:
    from vllm_rig.stages.runtime.facts import BuildState

    assert BuildState().default() == parse_build_state([])
    assert not BuildState().default()["active"] and not BuildState().default()["complete"]
