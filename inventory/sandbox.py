"""pyinfra inventory for the sandbox machines (start them with `python -m tests.sandbox up`).

    pyinfra -y inventory/sandbox.py deploy.py

Lists the machines that are running (rig1 if none is); VLLM_RIG_SANDBOX_MACHINES=N lists rig1..rigN.
VLLM_RIG_SANDBOX_HOST_DATA='{"rig1": {...}}' gives a machine host data of its own (a scenario with two runtime
kinds in one run).
Settings come from group_data like for any box; the only ones set here are where the sandbox's
stand-ins live (apt repo, git remotes, package indexes, HF mirror) and what a Debian 12 container is
(Python 3.11, a small disk). The deploy code never knows it is in a sandbox.

rig3 is the Ubuntu 24.04 machine: it identifies as noble, so the deploy takes its Ubuntu path, but its
packages are bookworm's, so it keeps Python 3.11 too (noble's is 3.12; tests/sandbox/README.md lists what
else differs).
"""

import json
import os
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:  # pyinfra puts the cwd on sys.path; make this work from anywhere
    sys.path.insert(0, _REPO)

from tests.sandbox import machine as _machine  # noqa: E402
from tests.sandbox import paths as _paths  # noqa: E402
from tests.sandbox.fixtures import chat_index as _chat_index  # noqa: E402
from tests.sandbox.fixtures import forge as _forge  # noqa: E402
from tests.sandbox.fixtures import nvidia_repo as _nvidia_repo  # noqa: E402
from tests.sandbox.fixtures import pkg_index as _pkg_index  # noqa: E402
from tests.sandbox.fixtures.pkg_index import locks as _pkg_locks  # noqa: E402
from vllm_rig.core import cli_limit as _cli_limit  # noqa: E402
from vllm_rig.core import op_order as _op_order  # noqa: E402
from vllm_rig.core import ssh_nodelay as _ssh_nodelay  # noqa: E402
from vllm_rig.known import upstream_compile as _upstream_compile  # noqa: E402

_ssh_nodelay.install()
_op_order.install()
_cli_limit.install()

_VLLM_PORT_BASE = _paths.VLLM_PORT_BASE


def _host(m: _machine.Machine) -> tuple[str, dict]:
    return (
        m.name,
        {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": m.port,
            # VLLM_RIG_SANDBOX_SSH_USER=root: a root login (tests: a box without sudo)
            "ssh_user": os.environ.get("VLLM_RIG_SANDBOX_SSH_USER") or "rig",
            "ssh_key": str(_paths.KEYS / _machine.KEY_NAME),  # made by `up`
            "ssh_allow_agent": False,
            "ssh_look_for_keys": False,
            "ssh_known_hosts_file": "/dev/null",
            "ssh_strict_host_key_checking": "no",
            "_sudo": True,
            "vllm_port": _VLLM_PORT_BASE + m.index,
            "lan_port": _paths.LAN_PORT_BASE + m.index,  # every machine shares the host's addresses
            "front_port": _paths.FRONT_PORT_BASE + m.index,
            "model_peer_port": _paths.MODEL_PEER_PORT_BASE + m.index,
            "chat_page_port": _paths.LAN_PORT_BASE + 20 + m.index,  # the chat page's nginx port
            "chat_page_backend_port": _paths.LAN_PORT_BASE + 40 + m.index,  # Open WebUI on loopback
            **_os_settings(m),
            **_host_data(m.name),
        },
    )


def _os_settings(m: _machine.Machine) -> dict:
    """Per-machine settings that follow from the machine's image."""
    if m.os == "ubuntu2404":
        return {"python_version": "3.11"}  # bookworm's python3 under a noble name; a real noble box has 3.12
    return {}


def _selected() -> list[_machine.Machine]:
    if os.environ.get("VLLM_RIG_SANDBOX_MACHINES"):
        return _machine.machines(int(os.environ["VLLM_RIG_SANDBOX_MACHINES"]))
    running = [m for m in _machine.machines(9) if _machine.is_running(m)]
    return running or _machine.machines(1)


def _flashinfer_patches() -> dict:
    """The stand-in FlashInfer fixes: fixed headers on the file server (raw-content layout), their hashes
    from the index's manifest."""
    try:
        fixes = _pkg_index.manifest()["flashinfer"]["fixes"]
    except (OSError, ValueError, KeyError):
        return {}  # not built yet: validation then names flashinfer_sm75_patches
    return {
        fix["applies_to"]: {
            "patch": f"pr{pr}",
            "files": {
                path: {"url": _pkg_index.raw_url(pr, path), "before": f["sha256_before"], "after": f["sha256_after"]}
                for path, f in fix["files"].items()
            },
        }
        for pr, fix in fixes.items()
    }


def _upstream() -> dict:
    """The upstream kind's stand-ins: the index's vLLM wheel (its sha256: the stand-in's, not PyPI's) and the
    stand-in SM75 and FlashQLA patches on the file server (raw-content layout), from the index's manifest."""
    try:
        built = _pkg_index.manifest()["upstream"]
    except (OSError, ValueError, KeyError):
        return {}  # not built yet: the runtime stage then names the wheel's or the patch's sha256
    return {
        "vllm_wheel_sha256": built["vllm_wheel"]["sha256"],
        "vllm_sdist_sha256": built["vllm_sdist"]["sha256"],
        "sm75_patch_files": {
            name: {"url": _pkg_index.upstream_url(patch["path"]), "sha256": patch["sha256"]}
            for name, patch in built["sm75_patches"].items()
        },
    }


def _host_data(name: str) -> dict:
    """VLLM_RIG_SANDBOX_HOST_DATA='{"rig1": {"runtime_kind": "upstream"}}': host data for one machine (what a
    real inventory gives one host), for scenarios that run two kinds in one run."""
    text = os.environ.get("VLLM_RIG_SANDBOX_HOST_DATA")
    return dict(json.loads(text).get(name, {})) if text else {}


def _fetchcontent_sources(refs: dict) -> dict:
    """What the stand-in fork's CMake-like build fetches for SM75, from the sandbox's git remotes."""
    pending = "0" * 40  # not built yet: the checkout then fails, naming the source
    return {
        name: {
            "repo": _forge.remote_url(repo),
            "ref": refs.get(repo, {}).get("main", pending),
            "env": env,
            "min_arch": None,
        }
        for name, repo, env in (
            ("flashmla", _forge.FLASHMLA, "FLASH_MLA_SRC_DIR"),
            ("qutlass", _forge.QUTLASS, "QUTLASS_SRC_DIR"),
            ("vllm-flash-attn", _forge.FLASH_ATTN, "VLLM_FLASH_ATTN_SRC_DIR"),
        )
    }


def _compile_sources(refs: dict) -> dict:
    """What the stand-in vLLM 0.26.0 source archive's CMake-like build fetches, from the sandbox's git remotes; the
    variables are the release's own (vllm_rig/known/upstream_compile.py)."""
    pending = "0" * 40  # not built yet: the checkout then fails, naming the source
    remotes = {
        "cutlass": (_forge.CUTLASS, _forge.CUTLASS_TAG),
        "triton_kernels": (_forge.TRITON, _forge.TRITON_TAG_UPSTREAM),
        "fmha_sm100": (_forge.MSA, "main"),
        "tml_fa4": (_forge.TML_FA4, "main"),
        "flashmla": (_forge.FLASHMLA, "main"),
        "qutlass": (_forge.QUTLASS, "main"),
        "vllm-flash-attn": (_forge.FLASH_ATTN, "main"),
        "deepgemm": (_forge.DEEPGEMM, "main"),
    }
    return {
        name: {
            "repo": _forge.remote_url(repo),
            "ref": refs.get(repo, {}).get(ref, pending),
            "env": _upstream_compile.SOURCES_0_26_0[name]["env"],
            "min_arch": None,
        }
        for name, (repo, ref) in remotes.items()
    }


def _settings() -> dict:
    """The sandbox's sources. SHAs come from the git remotes' manifest, written by `up`."""
    try:
        refs = _forge.manifest()
    except (OSError, ValueError):
        refs = {}  # not built yet: validation then says fork_ref is missing a value
    fork, flashqla = "weicj/vLLM-2080Ti-Definitive", "weicj/FlashQLA-SM70-SM75"
    return {
        "nvidia_repo_url": _nvidia_repo.repos_url() + "/{distro}/x86_64/",
        "nvidia_repo_key_fingerprint": _nvidia_repo.key_fingerprint(),  # the stand-in repository's own key
        "fork_repo": _forge.remote_url(fork),
        "fork_ref": refs.get(fork, {}).get("v0.1.17", "(run: python -m tests.sandbox up)"),
        "flashqla_repo": _forge.remote_url(flashqla),
        "flashqla_ref": refs.get(flashqla, {}).get("main", "(run: python -m tests.sandbox up)"),
        "cutlass_repo": _forge.remote_url(_forge.CUTLASS),
        "cutlass_ref": refs.get(_forge.CUTLASS, {}).get(_forge.CUTLASS_TAG, "(run: python -m tests.sandbox up)"),
        "triton_src_repo": _forge.remote_url(_forge.TRITON),
        "triton_src_ref": refs.get(_forge.TRITON, {}).get(_forge.TRITON_TAG, "(run: python -m tests.sandbox up)"),
        "fetchcontent_sources": _fetchcontent_sources(refs),
        "upstream_compile_sources": _compile_sources(refs),
        "flashinfer_sm75_patches": _flashinfer_patches(),
        **_upstream(),
        "allow_plain_http_mirrors": True,  # every mirror is the sandbox's own, on 127.0.0.1 (its LAN)
        "pip_index_url": _pkg_index.index_url(),
        "locks_dir": str(_pkg_locks.directory()),  # this index's own hashed locks, written on their first use
        "torch_index_url": _pkg_index.torch_index_url(),
        # The chat page (chat_page: true): Open WebUI's real closure (tests/sandbox/fixtures/chat_index.py, built
        # by its scenario); its real CPU torch comes from whl/cpu/, the default: torch_index_url's lane swapped.
        "chat_page_index_url": _chat_index.index_url(),
        "hf_endpoint": f"http://127.0.0.1:{_paths.HF_MIRROR_PORT}",
        "python_version": "3.11",  # Debian 12's python3
        "min_free_disk_gb": 5,
        "verify_bandwidth": False,  # the stand-in torch has no P2P copies or NCCL to time
        "start_check_needle_words": 1500,  # the stand-in prefills at a 2080 Ti's speed: keep each start short
        # Off here so every scenario's build stays a compile; tests/e2e/test_runtime_artifacts.py and
        # benchmarks/artifacts.py turn it on. The store is this checkout's (slot's) own.
        "runtime_artifacts": False,
        "runtime_artifact_store": str(_paths.STATE / "runtime-artifacts"),
        "runtime_artifact_key": str(_paths.STATE / "runtime-artifact.key"),
        **_runtime_kind(),
    }


def _runtime_kind() -> dict:
    """VLLM_RIG_SANDBOX_RUNTIME_KIND=fork: every machine on that kind (the test suite sets it: its scenarios
    were written for the fork's compile path; tests/e2e/test_upstream_kind.py gives rig1 the default kind by
    host data). Unset (bin/deploy's simulated rig): the default of group_data/all.py, like a real box."""
    kind = os.environ.get("VLLM_RIG_SANDBOX_RUNTIME_KIND")
    return {"runtime_kind": kind} if kind else {}


_hosts = {m.name: _host(m) for m in _selected()}


# Every sandbox machine; rig2 also stands for a box of the qwen38 profile.
sandbox = (list(_hosts.values()), _settings())
qwen38 = [_hosts[name] for name in ("rig2",) if name in _hosts]
