"""The settings schema: every value a user can change, its type, its allowed range, and the rules that
tie values together. Checked for every host before any command runs on any host.

Values live in group_data/ (all.py holds the defaults, one file per profile group), inventory host
data and `--data KEY=VALUE`. The schema gives no defaults of its own: group_data/all.py is the one
place they live, so a setting missing there is an error, not a silent fallback.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from vllm_rig.known import (
    cuda_toolkit,
    flashinfer_fix,
    fork_interface,
    git_tags,
    server_interface,
    sm75_patch,
    upstream_compile,
    upstream_releases,
)

SHA40 = re.compile(r"^[0-9a-f]{40}$")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2})?$")
CUDA_VERSION = re.compile(r"^\d{2}\.\d$")
GIT_REF = re.compile(r"^(?!/)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,200}(?<!/)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UNIT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
KEY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")  # the host program lan_keys's NAME: a file name and a log word
HF_TOKEN = re.compile(r"^[A-Za-z0-9_.-]{8,512}$")
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*(=.*)?$")
RELEASE_LINE = re.compile(r"^v?\d+(\.\d+)*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SM75_PATCH_NAMES = ("flashqla", "vllm")
FLASHINFER_PATCHES = ("pr3621", "pr3526")
DNS_NAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
# An inventory host's name as front_of lists it (it names files and nginx sockets on the front).
INVENTORY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")

# Paths on the box: they are spliced into commands, units, PATH and the rollback script, so they hold only
# characters no consumer reads specially (no space, quote, $, %, ;, :, backslash or control character).
SAFE_PATH = re.compile(r"/[A-Za-z0-9._+@/-]*")
# What clients ask for: vLLM's --served-model-name, the unit's Description=, bench and probe commands.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
# Settings rendered as JSON (json.dumps escapes every control character): a stop string may hold a newline.
JSON_SETTINGS = frozenset(
    {"reasoning_config", "default_chat_template_kwargs", "additional_config", "override_generation_config"}
)

# Settings that hold secrets: their values never appear in an error line or in output.
SECRET_KEYS = frozenset({"hf_token", "secure_boot_mok_password", "runtime_artifact_store_auth"})
# Environment names that hold secrets by convention (vllm_env refuses them; triage redacts their values).
SECRET_ENV_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|_PASSWORD)$", re.I)

# The model's max_position_embeddings (config.json of the Qwen3.6/3.8 27B family).
MODEL_CONTEXT_LIMIT = 262144

# Minimum driver per CUDA toolkit minor (NVIDIA's CUDA toolkit release notes, Linux x86_64).
MIN_DRIVER_FOR_CUDA = {"12.8": Version("570.26"), "12.9": Version("575.51.03")}

# What vLLM applies of --override-generation-config (ModelConfig.get_diff_sampling_param's available_params).
GENERATION_OVERRIDE_KEPT = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens")

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")

PositiveInt = Annotated[int, Field(ge=1)]

# The model catalogue (`models`, chosen by `model`): what an entry names, and the server settings that may go
# with a model in its "flags" (those of the service's flags that depend on the checkpoint, not on the box).
DEFAULT_MODEL = "default"
MODEL_ENTRY_KEYS = {
    "repo": "model_repo",
    "revision": "model_revision",
    "dir": "model_dir",
    "served_name": "served_model_name",
}
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MODEL_FLAG_KEYS = (
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "max_model_len",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "async_scheduling",
    "skip_mm_profiling",
    "reasoning_parser",
    "reasoning_config",
    "default_chat_template_kwargs",
    "enable_auto_tool_choice",
    "tool_call_parser",
    "chat_template_content_format",
    "gpu_memory_utilization",
    "additional_config",
    "num_speculative_tokens",
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "generation_config",
    "override_generation_config",
    "cpu_offload_gb",
    "vllm_env",
    "vllm_extra_args",
)


def _setting(description: str, allowed: str) -> Any:
    """Field metadata, the one place a setting is described: `description` is the line that says what it
    is (group_data/all.py's comment on its default, the settings table's "what it is" (docs/settings.md)), `allowed` the
    sentence that says what it accepts (error lines, the table's "allowed")."""
    return Field(description=description, json_schema_extra={"allowed": allowed})


class Settings(BaseModel):
    """Every setting of the rig. Field order follows the deploy's stages; each `# ---- <stage>` comment
    below names the stage of the fields under it (group_data/all.py's headings and the settings table
    follow it: vllm_rig/settings_doc.py)."""

    # strict: "on", "yes" or "8000" (a string) are typos here, not values; pyinfra's --data and YAML
    # already give real booleans and numbers.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    # ---- connection
    ssh_tcp_nodelay: bool = _setting("TCP_NODELAY on SSH sockets: no ~40 ms stall per remote command", "true or false")

    # ---- preflight: what the box must have
    gpu_count: Annotated[int, Field(ge=1, le=8)] = _setting(
        "GPUs the box must show (lspci before the driver, nvidia-smi after)", "an integer from 1 to 8"
    )
    gpu_min_memory_mib: Annotated[int, Field(ge=1024)] = _setting(
        "least memory per GPU in MiB (a 22 GB 2080 Ti reports 22528)", "an integer of MiB, at least 1024"
    )
    gpu_compute_capability: Literal["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"] = _setting(
        "compute capability every GPU must report (Turing = 7.5)", 'one of "7.0", "7.5", "8.0", "8.6", "8.9", "9.0"'
    )
    min_free_disk_gb: Annotated[int, Field(ge=1)] | None = _setting(
        "free GB needed under install_root; None: by runtime kind (compile 110, upstream wheels 40)",
        "null (by the runtime kind) or a positive integer of GB",
    )
    min_ram_gb: Annotated[int, Field(ge=1)] = _setting(
        "least RAM in GB; the CUDA build needs about 3 GB per compile job", "a positive integer of GB"
    )
    preflight_report: Literal["table", "json"] = _setting(
        "how the verdict is printed: table, or json (one line per host)", '"table" or "json"'
    )

    # ---- driver
    nvidia_repo_url: str = _setting(
        "NVIDIA's CUDA apt repository: the driver and the toolkit come from it",
        "an http(s) URL; {distro} is replaced by e.g. ubuntu2404",
    )
    nvidia_driver_version: str = _setting(
        "exact driver version, pinned and held (the reference setup's)", "an exact driver version such as 580.159.03"
    )
    nvidia_driver_flavor: Literal["proprietary", "open"] = _setting(
        "kernel module flavour: proprietary, or open (Turing+ only)", '"proprietary" or "open"'
    )
    nvidia_driver_replace_existing: bool = _setting(
        "replace an installed driver of another version (never by default)", "true or false"
    )
    secure_boot_mok_enrollment: Literal["by_hand", "deploy_stages"] = _setting(
        "Secure Boot, DKMS key not enrolled: by_hand (stop with steps) or deploy_stages", '"by_hand" or "deploy_stages"'
    )
    secure_boot_mok_password: str | None = _setting(
        "one-time MokManager password for deploy_stages; kept secret",
        "null or a one-time MokManager password (1 to 256 characters)",
    )
    nvidia_keep_archive_driver: bool = _setting(
        "keep Ubuntu's archive driver and Canonical's signed modules: no DKMS swap", "true or false"
    )
    gpu_power_limit_w: int | None = _setting(
        "power limit in W set at every boot; None keeps the card's default",
        "null (leave the card's default) or whole watts",
    )
    gpu_power_limit_min_w: Annotated[int, Field(ge=1)] = _setting(
        "lowest limit the card accepts (stock 2080 Ti BIOS)", "whole watts"
    )
    gpu_power_limit_max_w: Annotated[int, Field(ge=1)] = _setting(
        "highest limit the card accepts (stock 2080 Ti FE BIOS)", "whole watts"
    )
    reboot_timeout_s: Annotated[int, Field(ge=60, le=3600)] = _setting(
        "how long to wait for a rebooted host to come back", "seconds from 60 to 3600"
    )
    driver_reboot: Literal["auto", "ask"] = _setting(
        "auto: reboot the box once when the driver needs it; ask: stop and let the owner reboot it",
        '"auto" (the deploy reboots the box) or "ask" (the host stops with "reboot the box, then run again")',
    )

    # ---- cuda
    cuda_version: str = _setting(
        "CUDA toolkit major.minor, pinned (cuda-toolkit-12-9)", "a CUDA toolkit major.minor such as 12.9"
    )

    # ---- runtime
    install_root: str = _setting(
        "venvs, sources and runtimes live under here", "an absolute path (letters, digits, . _ + @ - /)"
    )
    runtime_kind: Literal["upstream", "fork"] = _setting(
        "upstream: vLLM's release + its first owner's SM75 patch; fork: weicj's fork",
        '"upstream" (vLLM\'s release with zyYuc\'s SM75 patch) or "fork" (weicj/vLLM-2080Ti-Definitive, compiled)',
    )
    upstream_build: Literal["wheel", "compile"] = _setting(
        "upstream: wheel = the release's kernels (minutes); compile = its sdist on CUDA 12.9",
        '"wheel" (the release\'s own kernels, no compile) or "compile" (PyPI\'s source archive, patched, compiled '
        "for gpu_compute_capability with the card's CUDA toolkit and the torch index's lane)",
    )
    vllm_version: str = _setting(
        "upstream: the vLLM release (vllm_rig/known/upstream_releases.py)",
        "a supported release in vllm_rig/known/upstream_releases.py: "
        + ", ".join(upstream_releases.supported_versions()),
    )
    vllm_wheel_sha256: str | None = _setting(
        "upstream: sha256 of the release's wheel; None: PyPI's, as the table records it",
        "null (PyPI's file, from vllm_rig/known/upstream_releases.py) or a 64-hex-digit sha256",
    )
    vllm_sdist_sha256: str | None = _setting(
        "upstream compile: sha256 of the release's source archive; None: PyPI's, as recorded",
        "null (PyPI's file, from vllm_rig/known/upstream_compile.py) or a 64-hex-digit sha256",
    )
    upstream_compile_sources: dict[str, dict[str, Any]] | None = _setting(
        "upstream compile: what the release's CMake fetches; None: its own pins",
        "null (the release's CMake pins, vllm_rig/known/upstream_compile.py) or a mapping as fetchcontent_sources "
        'that names "cutlass" and "triton_kernels"',
    )
    sm75_patch_files: dict[str, dict[str, str]] | None = _setting(
        "upstream: the SM75 patches' URLs and sha256; None: zyYuc's at aa935db (raw content)",
        'null (zyYuc/qwen3-8-27b-dual-2080ti-vllm@aa935db, git_mirror_prefix in front) or {"vllm": {"url": an '
        'http(s) URL, "sha256": 64 hex digits}, "flashqla": {...}}',
    )
    python_version: Literal["3.10", "3.11", "3.12", "3.13"] = _setting(
        "Python of the venv (Ubuntu 24.04's python3)", 'one of "3.10" to "3.13"'
    )
    torch_version: str = _setting(
        "torch; None: the kind's (upstream: the release's pin, PyPI CUDA 13.0; fork: 2.11.0+cu128)",
        "null (the runtime kind's own) or a PEP 440 version such as 2.13.0",
    )
    torchvision_version: str = _setting(
        "torchvision (Qwen3.x processors need it); None: the kind's (release pin; fork 0.26.0)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    torchaudio_version: str = _setting(
        "torchaudio; None: the kind's (the release's pin; fork 2.11.0)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    triton_version: str = _setting(
        "triton; None: the kind's (the pin of the release's torch; fork 3.6.0, the reference setup's)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    transformers_version: str = _setting("transformers, pinned to the reference setup's", "a PEP 440 version")
    numpy_version: str = _setting("numpy, pinned to the reference setup's", "a PEP 440 version")
    flashinfer_version: str = _setting(
        "flashinfer-python; None: the kind's (the release's pin; fork 0.6.16, SM75 fix merged)",
        "null (the runtime kind's own) or a FlashInfer release listed in flashinfer_requirement_overrides",
    )
    flashinfer_requirement_overrides: dict[str, dict[str, str]] = _setting(
        "per FlashInfer release: fork requirements replaced for pip (others refused)",
        "a mapping FlashInfer version -> {package: PEP 440 specifier} that replaces the fork's requirement "
        'for that package, e.g. {"0.6.14": {"nvidia-cutlass-dsl": "==4.5.2"}}',
    )
    flashinfer_sm75_fix: Literal["auto", "pr3621", "upstream", "none"] = _setting(
        "SM75 fix: auto (by version), pr3621, upstream (PR 3526) or none", '"auto", "pr3621", "upstream" or "none"'
    )
    fork_repo: str = _setting("the vLLM SM75 fork", "a git URL (https://...)")
    fork_ref: str = _setting("pinned commit on the fork's v0.1.x line", "a full 40-character commit SHA")
    flashqla_repo: str = _setting("FlashQLA with the SM70/SM75 GDN kernel", "a git URL (https://...)")
    flashqla_ref: str = _setting("pinned FlashQLA commit", "a full 40-character commit SHA")
    cutlass_repo: str = _setting("CUTLASS sources, fetched before the build", "a git URL (https://...)")
    cutlass_ref: str = _setting(
        "CUTLASS v4.4.2 (the fork's build.sh), as a commit", "a 40-character commit SHA (a tag can move)"
    )
    triton_src_repo: str = _setting("triton_kernels sources, fetched before the build", "a git URL (https://...)")
    triton_src_ref: str = _setting(
        "Triton v3.6.0 (the fork's build.sh), as a commit", "a 40-character commit SHA (a tag can move)"
    )
    fetchcontent_sources: dict[str, dict[str, Any]] = _setting(
        "what the fork's CMake fetches in the compile: fetched ahead via the git cache, by variable",
        'a mapping name -> {"repo": a git URL, "ref": a 40-character commit SHA (a tag can move), "env": the '
        'variable the fork\'s CMake reads for a local source, "min_arch": null or the lowest compute capability '
        "the fork's CMake fetches it for}",
    )
    flashinfer_sm75_patches: dict[str, dict[str, Any]] = _setting(
        "per FlashInfer release: its SM75 fix as fixed headers (raw URL, sha256 before/after)",
        'a mapping FlashInfer version -> {"patch": "pr3621" or "pr3526", "files": {path: {"url": the fixed '
        'file\'s http(s) URL (raw content at a commit), "before": sha256, "after": sha256}}}',
    )
    git_mirror_prefix: str = _setting(
        'put in front of every git URL (e.g. a GitHub proxy); "" for direct',
        '"" or a URL ending in "/" put in front of every git URL',
    )
    pip_index_url: str | None = _setting(
        "Python package index for pip; None uses pip's default (PyPI)", "null (pip's default index) or an http(s) URL"
    )
    torch_index_url: str = _setting(
        "torch wheel index, CUDA 12.8 lane", "an http(s) URL of a torch wheel index (e.g. the cu128 lane)"
    )
    locks_dir: str = _setting(
        "hashed locks of every pip install on a box (bin/locks; a missing one: written on first use)",
        "a directory on the control machine (relative to the repo), not a file or a URL",
    )
    allow_plain_http_mirrors: bool = _setting(
        "accept http:// mirrors (index, torch, git, HF, NVIDIA apt) on a trusted LAN; warns",
        "true or false (false: an http:// pip_index_url, torch_index_url, git_mirror_prefix, hf_endpoint or "
        "nvidia_repo_url is refused; use https://)",
    )
    build_max_jobs: Literal["auto"] | Annotated[int, Field(ge=1, le=256)] = _setting(
        "compile jobs: auto = min(8, threads, (RAM GB - 3) / 3)", '"auto" or an integer from 1 to 256'
    )
    build_timeout_s: Annotated[int, Field(ge=300)] = _setting(
        "give up on a build after this many seconds", "seconds, at least 300"
    )
    force_rebuild: bool = _setting("build a new runtime even when the fingerprint matches", "true or false")
    fork_release_line: str = _setting(
        "the fork's line fork_ref follows: tasks/fork_releases.py lists its newer v0.1.N tags",
        'a release line of the fork such as "v0.1" (its releases are the tags v0.1.N)',
    )
    fork_update_margin_pct: Annotated[float, Field(ge=0, le=50)] = _setting(
        "tasks/update_fork.py switches only if decode and prefill are at most this % slower",
        "percent (0 to 50) a new fork release's decode and prefill may be below the running one's and still switch",
    )
    runtime_artifacts: bool = _setting(
        "keep each compiled runtime by fingerprint; same-fingerprint hosts install it",
        "true or false",
    )
    runtime_artifact_store: str = _setting(
        "control-machine directory (relative to the repo) or http(s) WebDAV URL",
        'a directory on the control machine, or an http(s) URL of a WebDAV PUT store: a host, a path ending in "/"',
    )
    runtime_artifact_store_auth: str | None = _setting(
        "user:password for the http(s) store; kept secret, None: ~/.netrc or none",
        "null or user:password (one line)",
    )
    runtime_artifact_store_ca: str | None = _setting(
        "PEM CA bundle for an https store's certificate; None: the system's CAs",
        "null or the path, on the control machine, of a PEM CA bundle",
    )
    runtime_artifact_store_allow_http: bool = _setting(
        "accept an http:// store (password in clear, artifacts changeable); warns",
        "true or false (false: an http:// runtime_artifact_store is refused; use https://)",
    )
    runtime_artifact_key: str = _setting(
        "control-machine ed25519 key signing stored artifacts; made on first use",
        "a path on the control machine (relative to the repo), of a PEM private key or where one is made",
    )
    runtime_artifacts_keep: Annotated[int, Field(ge=1, le=100)] = _setting(
        "how many runtime artifacts the store keeps (the newest)", "an integer from 1 to 100"
    )

    # ---- model
    hf_endpoint: str = _setting(
        "Hugging Face endpoint or mirror (the reference setup's mirror)",
        "an http(s) URL of a Hugging Face endpoint or mirror",
    )
    hf_verify_endpoint: str | None = _setting(
        "a second endpoint the model's file hashes must match when reachable; None: hf_endpoint only",
        "null or an http(s) URL of a Hugging Face endpoint or mirror",
    )
    hf_token: str | None = _setting(
        "Hugging Face token for gated repos; kept secret, None sends none", "null or a Hugging Face token"
    )
    hf_disable_xet: bool = _setting("plain HTTP downloads (mirrors rarely serve Xet)", "true or false")
    model_repo: str = _setting("closest public id to the reference setup's model", "a repo id owner/name")
    model_revision: str = _setting(
        "branch, tag or commit; the resolved commit is recorded on the host", "a branch, tag or 40-character commit SHA"
    )
    model_dir: str = _setting("where the checkpoint lives", "an absolute path (letters, digits, . _ + @ - /)")
    download_timeout_s: Annotated[int, Field(ge=60)] = _setting(
        "give up on the download after this many seconds", "seconds, at least 60"
    )
    model_peers: bool = _setting(
        "fetch the model from another host of the run that holds it (or fetches it first), over the LAN",
        "true (hosts of one run with the same model fetch it from one of them) or false (each from hf_endpoint)",
    )
    model_peer_address: str | None = _setting(
        "the address the other hosts reach this one at for the model; None: its ssh_hostname",
        "null (the host's ssh_hostname) or a host name or IP address",
    )
    model_peer_port: Annotated[int, Field(ge=1, le=65535)] = _setting(
        "the port this host serves its model on while other hosts fetch it", "an integer from 1 to 65535"
    )
    model_peer_wait_s: Annotated[int, Field(ge=10)] = _setting(
        "how long a host waits for its peer to hold the model (at most half of download_timeout_s)",
        "seconds, at least 10",
    )
    model: str = _setting(
        'the model served: "default" (the four settings above) or a name in models',
        '"default" (the model_repo, model_revision, model_dir and served_model_name settings) or a name in models',
    )
    models: dict[str, dict[str, Any]] = _setting(
        "the catalogue: name -> repo, revision, dir, served name and the server flags that go with the model",
        'a mapping name -> {"repo": owner/name, "revision": a branch, tag or commit (optional, "main"), "dir": an '
        'absolute path, "served_name": a name without spaces, "flags": {setting: value} (optional; the server '
        "settings that go with the model: " + ", ".join(MODEL_FLAG_KEYS) + ')}; "default" is taken',
    )
    models_keep: Annotated[int, Field(ge=0, le=20)] = _setting(
        "models served before the current one that stay on disk; older ones are removed (space printed)",
        "how many models served before the current one stay on disk: an integer from 0 to 20",
    )

    # ---- service: the unit and the server's flags
    service_name: str = _setting(
        "systemd unit name (vllm.service)", "a lower-case unit name (letters, digits, - and _)"
    )
    service_user: str = _setting("system user the server runs as", "a lower-case user name")
    service_start_timeout_s: Annotated[int, Field(ge=60, le=7200)] = _setting(
        "TimeoutStartSec: the first start compiles for minutes", "seconds from 60 to 7200"
    )
    service_restart_sec: Annotated[int, Field(ge=0, le=600)] = _setting(
        "RestartSec between restarts", "seconds from 0 to 600"
    )
    vllm_log_file: str | None = _setting(
        "None logs to the journal; a path appends there like the reference setup's unit",
        "null (the journal) or an absolute path (letters, digits, . _ + @ - /)",
    )
    start_check_attempts: Annotated[int, Field(ge=1, le=10)] = _setting(
        "starts in a row whose known-answer check may fail before the service stays down",
        "an integer from 1 to 10",
    )
    start_check_needle_words: Annotated[int, Field(ge=100, le=60000)] = _setting(
        "words of the needle check's long prompt (~8K tokens)", "an integer from 100 to 60000"
    )
    start_check_kv_shrink_share: Annotated[float, Field(gt=0, lt=1)] = _setting(
        "a KV cache this share below the recorded one restarts the start once, then warns",
        "a share between 0 and 1",
    )
    gpu_wait_timeout_s: Annotated[int, Field(ge=0, le=3600)] = _setting(
        "how long a start waits for free GPUs before it fails naming what holds them", "seconds from 0 to 3600"
    )
    gpu_wait_max_used_mib: Annotated[int, Field(ge=0, le=65536)] = _setting(
        "memory a GPU may have in use and still count as free (any compute process holds it)",
        "MiB from 0 to 65536",
    )
    # A desktop's display server puts graphics contexts on the cards: Xorg and gnome-shell, 4-9 MiB each on
    # 2080 Ti desktops (issue 36), 45 MiB together in tests/unit/fixtures/tool_outputs/desktop-postgres. 64
    # covers them; a busier session (nvitop-152's X and gnome-shell: 98 MiB) holds the card until raised.
    # gpu_wait.py names what it allows, and refuses any compute process whatever this says.
    gpu_wait_graphics_max_mib: Annotated[int, Field(ge=0, le=4096)] = _setting(
        "MiB a desktop's graphics may hold per GPU (Xorg, gnome-shell: display, not compute)",
        "MiB from 0 (none) to 4096",
    )
    watchdog_enabled: bool = _setting(
        "a timer asks the server a known-answer question every watchdog_interval_s; false: off", "true or false"
    )
    watchdog_interval_s: Annotated[int, Field(ge=30, le=86400)] = _setting(
        "seconds between watchdog rounds", "seconds from 30 to 86400"
    )
    watchdog_failures: Annotated[int, Field(ge=1, le=100)] = _setting(
        "failed rounds in a row before the watchdog restarts the service", "an integer from 1 to 100"
    )
    watchdog_max_restarts: Annotated[int, Field(ge=0, le=100)] = _setting(
        "watchdog restarts in a row without a passing round before it gives up", "an integer from 0 to 100"
    )
    watchdog_timeout_s: Annotated[int, Field(ge=5, le=3600)] = _setting(
        "how long a watchdog round waits for its answer", "seconds from 5 to 3600"
    )
    served_model_name: str = _setting("model name clients ask for", "a name of letters, digits and . _ : / @ + -")
    vllm_host: str | None = _setting(
        'bind address; None: 127.0.0.1 behind the proxy, 0.0.0.0 with lan_serving = "direct"',
        "null (127.0.0.1 behind the proxy, 0.0.0.0 with lan_serving: direct) or an IP address to bind",
    )
    vllm_port: Annotated[int, Field(ge=1, le=65535)] = _setting("API port", "an integer from 1 to 65535")
    vllm_api_key: Literal["auto", "none"] = _setting(
        "auto: a key made once on the host; none: serve without a key", '"auto" (made on the host) or "none"'
    )
    tensor_parallel_size: Literal[1, 2, 4, 8] = _setting(
        "GPUs one model spans (TP2 over the NVLink pair)", "1, 2, 4 or 8"
    )
    device_ids: list[Annotated[int, Field(ge=0)]] | None = _setting(
        "GPUs the server uses: --device-ids (upstream), CUDA_VISIBLE_DEVICES (fork); None: all",
        "null (every GPU) or a list of GPU indexes (--device-ids upstream, CUDA_VISIBLE_DEVICES on the fork)",
    )
    dtype: Literal["half", "float16", "bfloat16", "auto"] = _setting(
        "compute dtype; SM75 has no BF16 tensor cores", '"half", "float16", "bfloat16" or "auto"'
    )
    quantization: Literal["fp8"] | None = _setting("weight quantization (FP8 through Marlin on SM75)", '"fp8" or null')
    kv_cache_dtype: str = _setting(
        "KV cache dtype; auto = FP16 (INT8 is refused)",
        "one of " + ", ".join(d for d in KV_CACHE_DTYPES if d != "int8") + " (int8 is refused)",
    )
    max_model_len: Annotated[int, Field(ge=1024)] = _setting(
        "context length in tokens", f"an integer from 1024 to {MODEL_CONTEXT_LIMIT}"
    )
    enable_prefix_caching: bool = _setting("reuse cached prefixes", "true or false")
    mamba_cache_mode: Literal["align", "all", "none"] | None = _setting(
        "--mamba-cache-mode (align for prefix caching on hybrid models); None omits", 'null, "align", "all" or "none"'
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=256)] = _setting("concurrent sequences", "an integer from 1 to 256")
    max_num_batched_tokens: Annotated[int, Field(ge=256)] = _setting(
        "chunked-prefill chunk size", "an integer, at least 256"
    )
    enable_chunked_prefill: bool = _setting("chunked prefill (long contexts OOM without it)", "true or false")
    async_scheduling: bool | None = _setting(
        "False renders --no-async-scheduling; None leaves the server default", "null (server default), true or false"
    )
    skip_mm_profiling: bool = _setting("skip multimodal memory profiling", "true or false")
    reasoning_parser: str | None = _setting(
        "reasoning parser for <think> blocks", "null or a parser name such as qwen3"
    )
    reasoning_config: dict[str, Any] | None = _setting(
        "--reasoning-config: the think-tag markers (the budget is default_thinking_token_budget)",
        "null or a JSON object with the keys " + ", ".join(fork_interface.REASONING_CONFIG_KEYS),
    )
    default_thinking_token_budget: int | None = _setting(
        "server-side thinking budget: in --reasoning-config (upstream), an env var (fork)",
        "null (no server-side default) or a positive integer such as 4000 (the reference setup's)",
    )
    default_chat_template_kwargs: dict[str, Any] | None = _setting(
        "--default-chat-template-kwargs", "null or a JSON object"
    )
    enable_auto_tool_choice: bool = _setting("let the model call tools on its own", "true or false")
    tool_call_parser: str = _setting(
        "tool-call parser; None: the kind's (upstream qwen3_coder as the first setup, fork qwen3_xml)",
        "null (the runtime kind's own) or a parser name such as qwen3_coder or qwen3_xml",
    )
    chat_template_content_format: Literal["auto", "string", "openai"] | None = _setting(
        "--chat-template-content-format", 'null, "auto", "string" or "openai"'
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=0.98)] = _setting(
        "share of GPU memory vLLM may take", "a number above 0 and at most 0.98"
    )
    additional_config: dict[str, Any] | None = _setting(
        "--additional-config (FlashQLA GDN prefill)", "null or a JSON object"
    )
    num_speculative_tokens: Annotated[int, Field(ge=0, le=8)] = _setting(
        "MTP draft tokens (MTP is required on this stack)", "an integer from 1 to 8 (MTP)"
    )
    cudagraph_mode: str = _setting(
        "CUDA graph mode (PIECEWISE is the only safe one with MTP here)",
        '"PIECEWISE" (' + ", ".join(m for m in CUDAGRAPH_MODES if m != "PIECEWISE") + " are refused with MTP)",
    )
    cudagraph_capture_sizes: list[int] = _setting(
        "graph sizes; largest = max_num_seqs x (1 + num_speculative_tokens)", "a list of positive integers, e.g. [4]"
    )
    generation_config: Literal["auto", "vllm"] | None = _setting(
        "--generation-config (auto or vllm); None omits", 'null, "auto" or "vllm"'
    )
    override_generation_config: dict[str, Any] | None = _setting(
        "sampling defaults the server applies (the reference setup's; presence_penalty dropped)",
        "null or a JSON object; a non-zero presence_penalty is refused (the server would drop it)",
    )
    cpu_offload_gb: Annotated[float, Field(ge=0)] | None = _setting(
        "--cpu-offload-gb; None omits", "null or a number of GB, at least 0"
    )
    disable_uvicorn_access_log: bool = _setting("no per-request access log lines", "true or false")
    omp_num_threads: Annotated[int, Field(ge=1, le=256)] | None = _setting(
        "OMP_NUM_THREADS for the server; None leaves it unset", "null or an integer from 1 to 256"
    )
    vllm_env: dict[str, str] = _setting(
        "the server's environment (SM75 switches from the reference setup's unit)",
        "a mapping of environment variable names to strings",
    )
    vllm_extra_args: list[str] = _setting(
        'extra server flags, e.g. ["--enforce-eager"]', 'a list of extra flags, each starting with "--"'
    )

    # ---- lan: how the LAN reaches the server (stages/lan: nginx in front of it)
    lan_serving: Literal["proxy", "direct"] = _setting(
        "proxy: nginx serves the LAN, the server stays on loopback; direct: the server itself (0.0.0.0)",
        '"proxy" (nginx serves the LAN: the key on every path, TLS, client networks) or "direct" (the server '
        "itself on vllm_host, 0.0.0.0 unless set: its key guards /v1, /v2, /inference, /cohere only; /invocations, "
        "/generative_scoring and the rest are open)",
    )
    lan_port: Annotated[int, Field(ge=1, le=65535)] = _setting(
        "the proxy's HTTPS port on every address of the box", "an integer from 1 to 65535, not vllm_port"
    )
    lan_allow: list[str] = _setting(
        "client networks; loopback always", 'a list of client networks in CIDR form, e.g. ["192.168.1.0/24"]'
    )
    lan_metrics_allow: list[str] = _setting(
        "who may read /metrics through the proxy besides loopback (a Prometheus host: x.x.x.x/32)",
        'a list of networks in CIDR form that may read /metrics besides loopback, e.g. ["192.168.1.10/32"]',
    )
    lan_health_open: bool = _setting(
        "True: /health answers without the key (an uptime monitor); every other path still needs it",
        "true (/health answers without the key) or false",
    )
    lan_tls: Literal["local_ca", "own"] = _setting(
        "local_ca: a CA made on the host signs the certificate; own: lan_tls_cert_file + lan_tls_key_file",
        '"local_ca" (a CA made on the host signs the certificate) or "own" (lan_tls_cert_file and lan_tls_key_file)',
    )
    lan_tls_cert_file: str | None = _setting(
        'lan_tls = "own": your PEM certificate (chain), a path on the control machine',
        "null or the path, on the control machine, of a PEM certificate (chain) for lan_tls: own",
    )
    lan_tls_key_file: str | None = _setting(
        'lan_tls = "own": its PEM private key on the control machine (kept secret; chmod 600)',
        "null or the path, on the control machine, of the certificate's PEM private key for lan_tls: own",
    )
    lan_tls_names: list[str] = _setting(
        "extra DNS names or IPs in the local CA's certificate (the host's name and addresses always are)",
        "a list of extra DNS names or IP addresses (the host's name and addresses are always in the certificate)",
    )
    lan_max_body_mb: Annotated[int, Field(ge=1, le=1024)] = _setting(
        "largest request body: a 262K-token prompt as escaped JSON is a few MB, images more", "MB from 1 to 1024"
    )
    lan_read_timeout_s: Annotated[int, Field(ge=60, le=86400)] = _setting(
        "longest silence from the server: a non-streamed answer to a 100K prompt comes at the end",
        "seconds from 60 to 86400",
    )
    front_of: list[str] = _setting(
        "other boxes of the inventory this box also answers for at front_port (one URL; same model on all)",
        "a list of other hosts' inventory names, each serving the same model behind its own proxy",
    )
    front_port: Annotated[int, Field(ge=1, le=65535)] = _setting(
        "front_of: the one URL's HTTPS port on this box", "an integer from 1 to 65535, not lan_port or vllm_port"
    )
    api_keys: list[str] = _setting(
        "clients' own keys, one per name, each made on the box (sudo cat /etc/vllm-rig/keys/NAME)",
        "a list of distinct key names, each a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32; not "
        '"server"), e.g. ["laptop", "agent", "chat-page"]',
    )
    chat_page: bool = _setting(
        "True: Open WebUI, a chat page for the household, on chat_page_port (docs/chat-page.md)",
        "true (Open WebUI on chat_page_port, behind nginx with the LAN's TLS) or false",
    )
    chat_page_port: Annotated[int, Field(ge=1, le=65535)] = _setting(
        "the chat page's HTTPS port (its own: Open WebUI cannot live under a path)",
        "an integer from 1 to 65535, not lan_port, vllm_port, front_port or chat_page_backend_port",
    )
    chat_page_backend_port: Annotated[int, Field(ge=1, le=65535)] = _setting(
        "Open WebUI's own port, on loopback only (nginx serves chat_page_port)",
        "an integer from 1 to 65535, not lan_port, vllm_port or chat_page_port",
    )
    chat_page_backups_keep: Annotated[int, Field(ge=1, le=365)] = _setting(
        "daily copies of the chat page's database kept on the box", "an integer from 1 to 365"
    )
    chat_page_torch_index_url: str | None = _setting(
        "the chat page's torch index; None: torch_index_url's CPU lane (/cpu/ for /cu128/)",
        "null (torch_index_url with its lane replaced by cpu) or an http(s) URL of a torch wheel index",
    )
    chat_page_index_url: str | None = _setting(
        "index for Open WebUI and its hash-locked dependencies; None: pip_index_url",
        "null (pip_index_url) or an http(s) URL of a Python package index",
    )

    # ---- verify and bench
    verify_gate: Literal["fail", "warn"] = _setting(
        "a failed verdict gate stops the host (fail) or only warns (warn)",
        '"fail" (a failed gate stops the host) or "warn"',
    )
    verify_bandwidth: bool = _setting(
        "measure P2P copy and NCCL all-reduce (needs both GPUs free for a minute)", "true or false"
    )
    verify_min_p2p_gbps: Annotated[float, Field(ge=0)] = _setting(
        "least P2P copy GB/s each way (2 NVLink2 links: ~40 measured, 50 ceiling)", "GB/s, at least 0"
    )
    verify_min_allreduce_gbps: Annotated[float, Field(ge=0)] = _setting(
        "least all-reduce bus GB/s (2 ranks: ceiling ~50; calibrate on your box)", "GB/s, at least 0"
    )
    bench_sizes: str = _setting(
        "the reference setup's runs: TOKENS:RUNS:MAX_TOKENS",
        'runs as TOKENS:RUNS:MAX_TOKENS, comma-separated, e.g. "20000:3:256,60000:2:128"',
    )
    bench_label: str = _setting(
        "label stored with bench results (e.g. FP8-KV, FP16-KV for an A/B)",
        "a short label for the results, e.g. FP8-KV",
    )

    # ---- operating
    status_format: Literal["table", "json"] = _setting(
        "how the status is printed: table, or json (one line per host on stdout)", '"table" or "json"'
    )
    triage_journal_lines: Annotated[int, Field(ge=10, le=100000)] = _setting(
        "journal lines of the service and the build in a triage bundle", "10 to 100000 lines"
    )
    logs_source: Literal["service", "build", "download", "watchdog"] = _setting(
        "whose log tasks/logs.py shows (bin/rig logs SOURCE)", '"service", "build", "download" or "watchdog"'
    )
    logs_lines: Annotated[int, Field(ge=1, le=100000)] = _setting(
        "lines of the log tasks/logs.py shows first (bin/rig logs -n)", "1 to 100000 lines"
    )
    logs_follow: bool = _setting(
        "tasks/logs.py keeps printing new lines until Ctrl-C (bin/rig logs -f)", "true or false"
    )
    keys_action: Literal["list", "add", "revoke"] = _setting(
        "what tasks/keys.py does: list the client keys, add or revoke one (bin/rig keys ACTION)",
        '"list", "add" or "revoke"',
    )
    keys_name: str | None = _setting(
        "the key tasks/keys.py adds or revokes (bin/rig keys add NAME)",
        "null or a key name: a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32)",
    )
    remove_model: bool = _setting(
        "tasks/remove.py also deletes the model directories (bin/rig remove --with-model)", "true or false"
    )
    remove_driver: bool = _setting(
        "tasks/remove.py also removes the NVIDIA driver and CUDA (bin/rig remove --with-driver)", "true or false"
    )
    remove_chat_data: bool = _setting(
        "tasks/remove.py also deletes the chat page's data (bin/rig remove --with-chat-data)", "true or false"
    )

    # The model catalogue: the chosen entry becomes the model and server settings.

    @model_validator(mode="before")
    @classmethod
    def _chosen_model(cls, data: Any) -> Any:
        return apply_model_choice(data) if isinstance(data, dict) else data

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        return with_kind_defaults(data) if isinstance(data, dict) else data

    @field_validator("models")
    @classmethod
    def _models(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return _each_entry(value, _model_entry_problem)

    # ---- field checks: formats a type alone cannot say

    @field_validator("*", mode="before")
    @classmethod
    def _one_line(cls, value: Any, info: ValidationInfo) -> Any:
        """Every string of every setting (dict keys, list items and nested values too) is one line of text:
        a line break in a value that lands in a unit, an environment file or a command would add a line there
        (a root ExecStartPre=+, a second command); a NUL cuts it. JSON settings are exempt: json.dumps escapes."""
        if info.field_name not in JSON_SETTINGS:
            bad = control_character(value)
            if bad is not None:
                raise ValueError(f"holds the control character {bad!r} (a line break, tab, NUL...): one line of text")
        return value

    @field_validator("gpu_compute_capability", "cuda_version", "python_version", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        """`--data cuda_version=12.9` arrives as the float 12.9 (pyinfra parses JSON); these are names."""
        return str(value) if isinstance(value, float) else value

    @field_validator(
        "torch_version",
        "torchvision_version",
        "torchaudio_version",
        "triton_version",
        "transformers_version",
        "numpy_version",
        "flashinfer_version",
    )
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError("must be a PEP 440 version such as 2.11.0") from None
        return value

    @field_validator("override_generation_config")
    @classmethod
    def _generation_override(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """vLLM reads --override-generation-config into ModelConfig.get_diff_sampling_param, which keeps only
        GENERATION_OVERRIDE_KEPT (0.27.1 config/model.py:1613-1622; 0.26.0 the same list, :1524-1531): any other
        key is dropped without a word. presence_penalty 0.0 is vLLM's own default (chat_completion/protocol.py:228),
        so only a non-zero one would be silently lost."""
        penalty = (value or {}).get("presence_penalty")
        if penalty not in (None, 0, 0.0):
            raise ValueError(
                f"presence_penalty {penalty!r} would be dropped: vLLM applies only "
                f"{', '.join(GENERATION_OVERRIDE_KEPT)} from --override-generation-config; set it to 0.0 or leave it "
                "out, and have clients send presence_penalty in their requests"
            )
        return value

    @field_validator("nvidia_driver_version")
    @classmethod
    def _driver_version(cls, value: str) -> str:
        if not DRIVER_VERSION.match(value):
            raise ValueError("must be an exact driver version such as 580.159.03")
        return value

    @field_validator("cuda_version")
    @classmethod
    def _cuda_version(cls, value: str) -> str:
        if not CUDA_VERSION.match(value):
            raise ValueError("must be a CUDA toolkit major.minor such as 12.9")
        if value not in MIN_DRIVER_FOR_CUDA:
            raise ValueError(
                "must be 12.8 or 12.9: the fork's v0.1.x line builds against torch cu128 "
                "and FlashInfer needs CUDA >= 12.8"
            )
        return value

    @field_validator("fork_ref", "flashqla_ref")
    @classmethod
    def _pinned_commit(cls, value: str) -> str:
        if not SHA40.match(value):
            raise ValueError("must be a full 40-character lower-case commit SHA (a branch or tag can move)")
        return value

    @field_validator("vllm_version")
    @classmethod
    def _vllm_version(cls, value: str) -> str:
        release = upstream_releases.release(value)  # ValueError: not in the table, with the supported ones
        if not release.supported:
            raise ValueError(f"vLLM {value} is not supported: {release.reason}")
        return value

    @field_validator("vllm_wheel_sha256", "vllm_sdist_sha256")
    @classmethod
    def _wheel_sha256(cls, value: str | None) -> str | None:
        if value is not None and not SHA256.match(value):
            raise ValueError("must be null or a 64-hex-digit lower-case sha256")
        return value

    @field_validator("sm75_patch_files")
    @classmethod
    def _patch_files(cls, value: dict[str, dict[str, str]] | None) -> dict[str, dict[str, str]] | None:
        if value is None:
            return value
        if set(value) != set(SM75_PATCH_NAMES):
            raise ValueError(
                f"must name exactly {', '.join(SM75_PATCH_NAMES)}, got {', '.join(sorted(value)) or 'none'}"
            )
        for name, entry in value.items():
            if not isinstance(entry, dict) or set(entry) != {"url", "sha256"}:
                raise ValueError(f'{name}: must be {{"url": ..., "sha256": ...}}')
            _check_url(entry["url"], f"sm75_patch_files.{name}.url")
            if not SHA256.match(entry["sha256"]):
                raise ValueError(f"{name}: sha256 must be 64 lower-case hex digits")
        return value

    @field_validator("cutlass_ref", "triton_src_ref")
    @classmethod
    def _commit(cls, value: str, info: ValidationInfo) -> str:
        repo = {"cutlass_ref": "NVIDIA/cutlass", "triton_src_ref": "triton-lang/triton"}[str(info.field_name)]
        problem = git_tags.ref_problem(value, repo)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("flashinfer_requirement_overrides")
    @classmethod
    def _overrides(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        return _each_entry(value, _override_entry_problem)

    @field_validator("flashinfer_sm75_patches")
    @classmethod
    def _patches(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return _each_entry(value, _patch_entry_problem)

    @field_validator("fetchcontent_sources")
    @classmethod
    def _fetchcontent(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return _each_entry(value, lambda _name, entry: _fetchcontent_problem(entry))

    @field_validator("upstream_compile_sources")
    @classmethod
    def _compile_sources(cls, value: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
        if value is None:
            return value
        missing = [name for name in upstream_compile.REQUIRED_SOURCES if name not in value]
        if missing:
            raise ValueError(f"must name {', '.join(upstream_compile.REQUIRED_SOURCES)}; missing: {', '.join(missing)}")
        return _each_entry(value, lambda _name, entry: _fetchcontent_problem(entry))

    @field_validator("fork_release_line")
    @classmethod
    def _release_line(cls, value: str) -> str:
        if not RELEASE_LINE.match(value):
            raise ValueError('must be a release line such as "v0.1" (v, then numbers joined by dots)')
        return value

    @field_validator("model_revision")
    @classmethod
    def _git_ref(cls, value: str) -> str:
        if not GIT_REF.match(value):
            raise ValueError("must be a branch, tag or 40-character commit SHA")
        return value

    @field_validator("hf_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        # It goes into an EnvironmentFile= line: whitespace, quotes, $ or \ would change what systemd reads.
        if value is not None and not HF_TOKEN.match(value):
            raise ValueError("must be null or one word of letters, digits and - _ . (a Hugging Face token: hf_...)")
        return value

    @field_validator("secure_boot_mok_password")
    @classmethod
    def _mok_password(cls, value: str | None) -> str | None:
        # mokutil reads it twice from stdin (PASSWORD_MIN 1, PASSWORD_MAX 256): one line, no line break.
        if value is not None and not (1 <= len(value) <= 256 and "\n" not in value and "\r" not in value):
            raise ValueError("must be null or one line of 1 to 256 characters")
        return value

    @field_validator("model_repo")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not REPO_ID.match(value):
            raise ValueError("must be a repo id owner/name, e.g. Qwen/Qwen3.8-27B-FP8")
        return value

    @field_validator(
        "fork_repo",
        "flashqla_repo",
        "cutlass_repo",
        "triton_src_repo",
        "hf_endpoint",
        "torch_index_url",
        "nvidia_repo_url",
    )
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        return _check_url(value, info.field_name)

    @field_validator("pip_index_url", "hf_verify_endpoint", "chat_page_torch_index_url", "chat_page_index_url")
    @classmethod
    def _optional_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _check_url(value, info.field_name)

    @field_validator("git_mirror_prefix")
    @classmethod
    def _mirror_prefix(cls, value: str) -> str:
        if value and (not value.endswith("/") or not value.startswith(("http://", "https://"))):
            raise ValueError('must be "" or an http(s) URL ending in "/"')
        return _check_url(value, "git_mirror_prefix") if value else value

    @field_validator("install_root", "model_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return _check_absolute(value)

    @field_validator("vllm_log_file")
    @classmethod
    def _optional_absolute(cls, value: str | None) -> str | None:
        return None if value is None else _check_absolute(value)

    @field_validator("service_name", "service_user")
    @classmethod
    def _unit_name(cls, value: str) -> str:
        if not UNIT_NAME.match(value):
            raise ValueError("must start with a lower-case letter and hold only a-z, 0-9, - and _ (max 32)")
        return value

    @field_validator("model_peer_address")
    @classmethod
    def _peer_address(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.:-]*", value):
            raise ValueError("must be null, a host name or an IP address")
        return value

    @field_validator("served_model_name")
    @classmethod
    def _served_name(cls, value: str) -> str:
        if not SERVED_NAME.fullmatch(value):
            raise ValueError("must be a name of up to 128 letters, digits and . _ : / @ + -")
        return value

    @field_validator("vllm_host")
    @classmethod
    def _bind_address(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError("must be an IP address to bind, e.g. 0.0.0.0 (all) or 127.0.0.1 (local only)") from None
        return value

    @field_validator("lan_allow", "lan_metrics_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            problem = _network_problem(entry)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("front_of")
    @classmethod
    def _front_of(cls, value: list[str]) -> list[str]:
        for name in value:
            if not INVENTORY_NAME.match(name):
                raise ValueError(f"{name!r} is not an inventory host name (letters, digits and . _ : @ -)")
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"names {', '.join(repeated)} more than once")
        return value

    @field_validator("lan_tls_names")
    @classmethod
    def _tls_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not (_is_ip(name) or DNS_NAME.match(name)):
                raise ValueError(f"{name!r} is neither a DNS name (letters, digits, - and dots) nor an IP address")
        return value

    @field_validator("api_keys")
    @classmethod
    def _api_keys(cls, value: list[str]) -> list[str]:
        for name in value:
            _key_name_problem(name)
        repeated = sorted({n for n in value if value.count(n) > 1})
        if repeated:
            raise ValueError(f"names {repeated[0]!r} twice: each key name once")
        return value

    @field_validator("keys_name")
    @classmethod
    def _keys_name(cls, value: str | None) -> str | None:
        if value is not None:
            _key_name_problem(value)
        return value

    @field_validator("runtime_artifact_store")
    @classmethod
    def _artifact_store(cls, value: str) -> str:
        problem = artifact_store_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("runtime_artifact_store_auth")
    @classmethod
    def _artifact_store_auth(cls, value: str | None) -> str | None:
        if value is not None and (":" not in value or value.startswith(":") or "\n" in value or "\r" in value):
            raise ValueError("must be null or user:password on one line")
        return value

    @field_validator("lan_tls_cert_file", "lan_tls_key_file", "runtime_artifact_store_ca", "runtime_artifact_key")
    @classmethod
    def _control_path(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value):
            raise ValueError("must be null or a path on the control machine")
        return value

    @field_validator("locks_dir")
    @classmethod
    def _locks_dir(cls, value: str) -> str:
        problem = locks_dir_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_cache_dtype(cls, value: str) -> str:
        if value not in KV_CACHE_DTYPES:
            raise ValueError("must be one of " + ", ".join(KV_CACHE_DTYPES))
        if value == "int8":
            raise ValueError(
                "INT8 KV cache collapses MTP acceptance at long context on SM75 (second setup: 16K -> 12 tok/s); "
                "use auto (FP16) or fp8_e4m3"
            )
        return value

    @field_validator("cudagraph_mode")
    @classmethod
    def _cudagraph_mode(cls, value: str) -> str:
        if value not in CUDAGRAPH_MODES:
            raise ValueError("must be one of " + ", ".join(CUDAGRAPH_MODES))
        if value != "PIECEWISE":
            raise ValueError(
                "must be PIECEWISE: with MTP on this stack FULL cudagraphs corrupt the output "
                "and NONE (eager) is too slow to serve"
            )
        return value

    @field_validator("max_model_len")
    @classmethod
    def _context_limit(cls, value: int) -> int:
        if value > MODEL_CONTEXT_LIMIT:
            raise ValueError(f"must be at most {MODEL_CONTEXT_LIMIT} (the model's max_position_embeddings)")
        return value

    @field_validator("num_speculative_tokens")
    @classmethod
    def _mtp_on(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1: without MTP this hybrid GDN model degrades into garbage output")
        return value

    @field_validator("cudagraph_capture_sizes")
    @classmethod
    def _capture_sizes(cls, value: list[int]) -> list[int]:
        if not value or any(size < 1 for size in value) or len(set(value)) != len(value):
            raise ValueError("must be a non-empty list of distinct positive integers, e.g. [4]")
        return value

    @field_validator("vllm_env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name in ("VLLM_API_KEY", "HF_TOKEN"):
                raise ValueError(f"{name} is a secret: use vllm_api_key / hf_token, which keep it off the unit")
            if name == fork_interface.THINKING_BUDGET_ENV:
                raise ValueError(f"{name} is the setting default_thinking_token_budget: set it there")
            if SECRET_ENV_NAME.search(name):
                raise ValueError(
                    f"{name} looks like a secret, and vllm_env is in hosts.yml and the deploy's output: give it to "
                    "the server in a root-only EnvironmentFile= drop-in of your own"
                )
        return value

    @field_validator("bench_sizes")
    @classmethod
    def _bench_sizes(cls, value: str) -> str:
        if not re.fullmatch(r"\d+:\d+:\d+(,\d+:\d+:\d+)*", value):
            raise ValueError('must be TOKENS:RUNS:MAX_TOKENS, comma-separated, e.g. "20000:3:256,60000:2:128"')
        return value

    @field_validator("bench_label")
    @classmethod
    def _bench_label(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,40}", value):
            raise ValueError("must be 1-40 letters, digits, dots, dashes or underscores")
        return value

    @field_validator("vllm_extra_args")
    @classmethod
    def _extra_args(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for arg in value:
            if arg.split("=", 1)[0] == "--api-key":
                raise ValueError(
                    "--api-key would put the key on the server's command line (ps) and in its unit: "
                    'use vllm_api_key: "auto" (a key made on the host, kept in a root-only env file)'
                )
            if not FLAG.match(arg):
                raise ValueError(f'{arg!r} is not a flag: write each as "--name" or "--name=value"')
        server = _server_interface(info)
        unknown = server.unknown_flags([arg.split("=", 1)[0] for arg in value]) if server else []
        if server and unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not a flag of {server.line}; its server would exit with code 2 at "
                "argument parsing"
            )
        return value

    @field_validator("reasoning_config")
    @classmethod
    def _reasoning_keys(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value and server_interface.BUDGET_KEY in value:
            raise ValueError(
                f"{server_interface.BUDGET_KEY} is the setting default_thinking_token_budget: set it there "
                "(it is rendered the way the runtime kind's server reads it)"
            )
        server = _server_interface(info)
        unknown = server.unknown_reasoning_keys(value or {}) if server else []
        if server and unknown:
            raise ValueError(
                f"key {', '.join(unknown)} is not accepted by {server.line}: its ReasoningConfig takes only "
                f"{', '.join(server.reasoning_keys)} and its server would exit with code 2"
            )
        return value

    @field_validator("default_thinking_token_budget", mode="before")
    @classmethod
    def _thinking_budget(cls, value: Any) -> Any:
        # bool is an int to Python; 0 or less would end every answer's thinking before it starts.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(
                f"must be null or a positive integer (thinking tokens), got {value!r}; the fork reads it "
                f"as {fork_interface.THINKING_BUDGET_ENV} (ignoring anything int() refuses), the patched release "
                "in --reasoning-config"
            )
        return value

    # ---- rules that tie settings together (from the two reference setups and their notes)

    @model_validator(mode="after")
    def _cross_rules(self) -> Settings:
        problems = list(_cross_rule_problems(self))
        if problems:
            raise CrossRuleErrors(problems)
        return self

    # ---- derived values

    @property
    def server_host(self) -> str:
        """The address the server binds: vllm_host, else loopback behind the proxy and all addresses direct."""
        if self.vllm_host is not None:
            return self.vllm_host
        return "0.0.0.0" if self.lan_serving == "direct" else "127.0.0.1"

    @property
    def max_cudagraph_capture_size(self) -> int:
        return max(self.cudagraph_capture_sizes)

    @property
    def runtime(self) -> str:
        """The runtime kind these settings build: "fork", "upstream-wheel" or "upstream-compile". The one place that
        reads runtime_kind and upstream_build together: KIND_RULES below and vllm_rig/stages/runtime/kinds/ go by
        it."""
        return "fork" if self.runtime_kind == "fork" else f"upstream-{self.upstream_build}"

    @property
    def cuda_home(self) -> str:
        return f"/usr/local/cuda-{self.cuda_version}"

    def vllm_wheel(self) -> upstream_releases.Release:
        return upstream_releases.release(self.vllm_version)

    def vllm_sdist(self) -> upstream_compile.Sdist:
        return upstream_compile.sdist(self.vllm_version)

    def vllm_sdist_hash(self) -> str:
        return self.vllm_sdist_sha256 or self.vllm_sdist().sha256

    def compile_sources(self) -> dict[str, dict[str, Any]]:
        """What the release's CMake fetches: the setting, else the release's own pins."""
        chosen = self.upstream_compile_sources or self.vllm_sdist().sources
        return {name: dict(entry) for name, entry in chosen.items()}

    def sm75_patches(self) -> dict[str, dict[str, str]]:
        """{"vllm": {"url", "sha256"}, "flashqla": ...}: the setting, else the known files at their commit
        through git_mirror_prefix."""
        if self.sm75_patch_files is not None:
            return {name: dict(entry) for name, entry in self.sm75_patch_files.items()}
        known = {"vllm": sm75_patch.VLLM_PATCH, "flashqla": sm75_patch.FLASHQLA_PATCH}
        return {name: {"url": f.url(self.git_mirror_prefix), "sha256": f.sha256} for name, f in known.items()}

    def flashinfer_patch(self) -> str | None:
        """The FlashInfer SM75 patch this configuration applies ("pr3621", "pr3526" or None)."""
        return flashinfer_fix.resolve(self.flashinfer_version, self.flashinfer_sm75_fix)

    def requirement_overrides(self) -> dict[str, str]:
        """{package: specifier} replacing the fork's requirements for this FlashInfer release ({} if none)."""
        wanted = Version(self.flashinfer_version)
        entry = next(
            (pkgs for key, pkgs in self.flashinfer_requirement_overrides.items() if Version(key) == wanted), None
        )
        return dict(entry or {})

    def flashinfer_patch_data(self) -> dict[str, Any] | None:
        """The flashinfer_sm75_patches entry for flashinfer_version (None when no patch applies)."""
        if self.flashinfer_patch() is None:
            return None
        return _patch_entry(self.flashinfer_sm75_patches, self.flashinfer_version)


class CrossRuleErrors(ValueError):
    """Several (key, message) problems found by the cross-field rules."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{key}: {msg}" for key, msg in problems))
        self.problems = problems


def catalogue_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the chosen catalogue entry sets ({} for "default", an unknown name or a malformed entry)."""
    name = data.get("model")
    models = data.get("models")
    if name == DEFAULT_MODEL or not isinstance(models, dict) or not isinstance(name, str):
        return {}
    entry = models.get(name)
    if not isinstance(entry, dict) or _model_entry_problem(name, entry) is not None:
        return {}  # the models field reports it
    values = {setting: entry[key] for key, setting in MODEL_ENTRY_KEYS.items() if key in entry}
    values.setdefault("model_revision", "main")
    values.update(entry.get("flags") or {})
    return values


def apply_model_choice(data: Mapping[str, Any]) -> dict[str, Any]:
    """Host data with the chosen catalogue entry's values in place of the single-model settings."""
    return {**data, **catalogue_values(data)}


def _model_entry_problem(name: str, entry: Any) -> str | None:
    """What is wrong with one models entry, or None (the values themselves are checked as the settings they set)."""
    if name == DEFAULT_MODEL:
        return '"default" is the model of the model_repo, model_revision, model_dir and served_model_name settings'
    if not MODEL_NAME.match(name):
        return "the name must be 1-64 letters, digits, dots, dashes or underscores"
    if not isinstance(entry, dict) or not {"repo", "dir", "served_name"} <= set(entry):
        return 'must be {"repo": ..., "dir": ..., "served_name": ...} ("revision" and "flags" may be left out)'
    unknown = set(entry) - set(MODEL_ENTRY_KEYS) - {"flags"}
    if unknown:
        return f"{', '.join(sorted(unknown))}: not a key of a model entry (repo, revision, dir, served_name, flags)"
    flags = entry.get("flags") or {}
    if not isinstance(flags, dict):
        return '"flags" must map server settings to their values'
    foreign = [key for key in flags if key not in MODEL_FLAG_KEYS]
    if foreign:
        return f"flags {', '.join(foreign)}: not a server setting that goes with a model ({', '.join(MODEL_FLAG_KEYS)})"
    return None


def _each_entry(value: dict[str, Any], problem_of: Callable[[str, Any], str | None]) -> dict[str, Any]:
    """A mapping setting is valid when every entry is: the first entry with a problem is the one line."""
    for key, entry in value.items():
        problem = problem_of(key, entry)
        if problem:
            raise ValueError(f"entry {key!r}: {problem}")
    return value


def locks_dir_problem(value: str) -> str | None:
    """What is wrong with locks_dir, or None: a directory on the control machine (relative ones from the project's
    root), there already or to be made by the first lock written into it."""
    if not value.strip() or value != value.strip():
        return "must be a directory on the control machine, e.g. locks"
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        return "must be a directory on the control machine, not a URL: the locks are read and written here"
    path = Path(value)
    found = path if path.is_absolute() else Path(__file__).resolve().parents[1] / path
    if found.exists() and not found.is_dir():
        return f"must be a directory on the control machine; {found} is a file"
    return None


def artifact_store_problem(value: str) -> str | None:
    """What is wrong with runtime_artifact_store, or None: a directory, or an http(s) URL of a directory."""
    if not value.strip() or "\n" in value:
        return "must be a directory on the control machine or an http(s) URL"
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value):
        return None  # a path (a colon only after a slash is a path too)
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https"):
        return f"a URL store must be http:// or https://, not {url.scheme}:"
    if "@" in url.netloc:
        return "must not hold credentials: put user:password in runtime_artifact_store_auth"
    if not url.hostname:
        return "must name a host, e.g. https://store.lan/vllm-rig/"
    if url.query or url.fragment or not url.path.endswith("/"):
        return 'must be the store\'s directory: a path ending in "/", no ?query or #fragment'
    return None


# Where a URL setting's credentials belong instead: a URL is on command lines (ps), in units and in logs.
URL_SECRET_HINT = {"hf_endpoint": "put the token in hf_token (kept in a root-only file on the host)"}


def _check_url(value: str, key: str | None = None) -> str:
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise ValueError("must be an http:// or https:// URL")
    if "@" in urllib.parse.urlsplit(value).netloc:
        hint = URL_SECRET_HINT.get(key or "", "use a mirror the hosts reach without credentials")
        raise ValueError(f"must not hold credentials (user:password@ ends up in ps, units and logs): {hint}")
    return value


def _patch_entry(patches: dict[str, dict[str, Any]], version: str) -> dict[str, Any] | None:
    """The entry for `version`, matched as a PEP 440 version ("0.6.14" and "0.6.14.0" are one release)."""
    wanted = Version(version)
    return next((entry for key, entry in patches.items() if Version(key) == wanted), None)


def _patch_entry_problem(version: str, entry: Any) -> str | None:
    """What is wrong with one flashinfer_sm75_patches entry, or None."""
    try:
        Version(version)
    except InvalidVersion:
        return "the key must be a FlashInfer version such as 0.6.14"
    if isinstance(entry, dict) and "url" in entry:
        return 'has a diff "url": the fix is now each fixed header\'s own "url" under "files" (raw content at a commit)'
    if not isinstance(entry, dict) or set(entry) != {"patch", "files"}:
        return 'must be {"patch": ..., "files": {path: {"url": ..., "before": ..., "after": ...}}}'
    if entry["patch"] not in FLASHINFER_PATCHES:
        return 'patch must be "pr3621" or "pr3526"'
    files = entry["files"]
    if not isinstance(files, dict) or not files:
        return "files must map at least one header path to its fixed file's URL and its sha256 before and after"
    for path, fixed in files.items():
        if path.startswith("/") or ".." in path.split("/"):
            return f"{path!r} must be a path inside FlashInfer's source tree (include/...)"
        if not isinstance(fixed, dict) or set(fixed) != {"url", "before", "after"}:
            return f'{path!r} must be {{"url": the fixed file\'s URL, "before": sha256, "after": sha256}}'
        if not isinstance(fixed["url"], str) or not re.match(r"^https?://\S+$", fixed["url"]):
            return f"{path!r}: url must be an http(s) URL of the fixed file (raw content at a commit)"
        if not fixed["url"].endswith("/" + path):
            return f"{path!r}: url must be the fixed file itself, ending in /{path} (not a diff)"
        if not all(isinstance(fixed[k], str) and SHA256.match(fixed[k]) for k in ("before", "after")):
            return f"{path!r}: before and after must be 64 lower-case hex digits (sha256)"
    return None


def _override_entry_problem(version: str, packages: Any) -> str | None:
    """What is wrong with one flashinfer_requirement_overrides entry, or None."""
    try:
        Version(version)
    except InvalidVersion:
        return "the key must be a FlashInfer version such as 0.6.14"
    if not isinstance(packages, dict):
        return "must map package names to PEP 440 specifiers"
    for name, spec in packages.items():
        try:
            requirement = Requirement(f"{name}{spec}")
            SpecifierSet(spec)
        except (InvalidRequirement, InvalidSpecifier, TypeError):
            return f"{name!r}: {spec!r} is not a package name with a PEP 440 specifier such as ==4.5.2"
        if requirement.name != name or not spec:
            return f"{name!r}: {spec!r} must be a specifier such as ==4.5.2 or >=1.25"
    return None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _network_problem(entry: str) -> str | None:
    """Why `entry` is not a network in CIDR form (nginx's allow takes it as written), or None."""
    try:
        ipaddress.ip_network(entry, strict=True)
    except ValueError:
        try:
            loose = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return f"{entry!r} is not a network in CIDR form such as 192.168.1.0/24"
        return f"{entry!r} has host bits set: the network is {loose}"
    return None


def _check_absolute(value: str) -> str:
    if not SAFE_PATH.fullmatch(value):
        raise ValueError("must be an absolute path of letters, digits and . _ + @ - / (no spaces, quotes, $, % or ;)")
    return value


def control_character(value: Any) -> str | None:
    """The first control or line-separator character in a string, or in any key, item or value inside it."""
    if isinstance(value, str):
        for ch in value:
            if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
                return ch
        return None
    if isinstance(value, dict):
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    for item in items:
        bad = control_character(item)
        if bad is not None:
            return bad
    return None


def _server_interface(info: ValidationInfo) -> server_interface.ServerInterface | None:
    """The interface of the server the settings' runtime kind installs; None when the kind or the release
    is itself invalid (that setting's own line says why)."""
    kind, version = info.data.get("runtime_kind"), info.data.get("vllm_version")
    if kind is None or (kind == "upstream" and version is None):
        return None
    try:
        return server_interface.for_kind(kind, version or "")
    except ValueError:
        return None


# Settings whose null means "what the runtime kind installs": the upstream kind's release pins them in its wheel's
# METADATA (and its tool-call parser is the first setup's); the fork's are fork_interface.OWN_SETTINGS.
KIND_DEFAULTED = (
    "torch_version",
    "torchvision_version",
    "torchaudio_version",
    "flashinfer_version",
    "triton_version",
    "tool_call_parser",
)
# vLLM 0.27.1's tool_parsers/__init__.py registers qwen3_coder and qwen3_xml to one class (Qwen3EngineToolParser,
# lines 161-168), as 0.26.0 does: the first setup's own spelling serves the same parser.
UPSTREAM_TOOL_CALL_PARSER = "qwen3_coder"


def kind_defaults(kind: Any, version: Any) -> dict[str, str]:
    """What KIND_DEFAULTED settings left null become for this runtime kind and release ({} when the kind or the
    release is not valid: their own lines say why)."""
    if kind == "fork":
        return dict(fork_interface.OWN_SETTINGS)
    if kind != "upstream" or not isinstance(version, str):
        return {}
    try:
        pins = upstream_release_pins(version)
    except ValueError:
        return {}
    return {**pins, "tool_call_parser": UPSTREAM_TOOL_CALL_PARSER}


def with_kind_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """Host data with each null KIND_DEFAULTED setting replaced by its kind's value."""
    # An invalid kind or release has its own line; the default release's values keep it the only one.
    own = kind_defaults(data.get("runtime_kind"), data.get("vllm_version")) or kind_defaults(
        "upstream", upstream_releases.DEFAULT
    )
    return {**data, **{key: own[key] for key in KIND_DEFAULTED if data.get(key) is None and key in own}}


def upstream_release_pins(version: str) -> dict[str, str]:
    """The settings the upstream kind holds to a release's own wheel pins (its METADATA, and its torch's triton),
    by setting name."""
    r = upstream_releases.release(version)
    pins = {
        "torch_version": r.torch,
        "torchvision_version": r.torchvision,
        "torchaudio_version": r.torchaudio,
        "flashinfer_version": r.flashinfer,
    }
    triton = cuda_toolkit.TRITON_FOR_TORCH.get(r.torch)
    return {**pins, "triton_version": triton} if triton else pins


# Where the hosts get code and data from. nvidia_repo_url is here too: apt checks the repository's signature, but
# the keyring that holds its key is downloaded from that same URL (stages/driver/keyring.py).
MIRROR_SETTINGS = (
    "pip_index_url",
    "torch_index_url",
    "git_mirror_prefix",
    "hf_endpoint",
    "nvidia_repo_url",
    "chat_page_torch_index_url",
    "chat_page_index_url",
)


def plain_http_mirrors(s: Settings) -> list[tuple[str, str]]:
    """(setting, URL) of each mirror setting that is plain http://."""
    found = ((key, getattr(s, key)) for key in MIRROR_SETTINGS)
    return [(key, str(url)) for key, url in found if url and str(url).lower().startswith("http://")]


def plain_http_warnings(by_host: Mapping[str, Settings]) -> list[str]:
    """One line per plain-http mirror the run uses (allowed by allow_plain_http_mirrors), said on every run."""
    seen: dict[tuple[str, str], None] = {}
    for s in by_host.values():
        for pair in plain_http_mirrors(s):
            seen.setdefault(pair, None)
    return [
        f"{key} {url} is plain http:// (allow_plain_http_mirrors): anyone on the way can change what the hosts "
        "install; keep it to a trusted LAN"
        for key, url in seen
    ]


def _unpinned_sources(s: Settings):
    """A release's CMake source this compile would check out that is known only by its tag, with no commit
    recorded for it (the commit goes in upstream_compile_sources; a tag is never checked out)."""
    if s.upstream_compile_sources is None:
        try:
            sources = s.vllm_sdist().sources
        except ValueError:
            return  # no archive recorded for the release: its own line says so
        for name, entry in sorted(sources.items()):
            problem = git_tags.ref_problem(str(entry["ref"]), str(entry["repo"]))
            if problem:
                yield (
                    "upstream_compile_sources",
                    f"must be set for upstream_build compile of vLLM {s.vllm_version}: its {name} is pinned by the "
                    f"tag {entry['ref']!r} only ({problem}); give every source with its commit",
                )
                return


def _upstream_problems(s: Settings, build_rules: Callable[[Settings], Iterator[tuple[str, str]]] | None = None):
    """The upstream kind installs the release's own pins: the torch and FlashInfer settings must be them.
    `build_rules`: the compile's own, said after the release's."""
    try:
        server_interface.upstream(s.vllm_version)
    except ValueError as err:
        yield "vllm_version", str(err)
    r = upstream_releases.release(s.vllm_version)
    if r.torch not in cuda_toolkit.FOR_TORCH:
        yield "vllm_version", f"vLLM {r.version} pins torch {r.torch}, whose CUDA toolkit the rig does not know"
    if build_rules is not None:
        yield from build_rules(s)
    for key, pin in upstream_release_pins(r.version).items():
        if getattr(s, key) != pin:
            yield (
                key,
                f"must be {pin} with runtime_kind upstream: vLLM {r.version}'s wheel pins it (its METADATA), "
                f"got {getattr(s, key)}",
            )
    if s.default_thinking_token_budget is not None and (s.vllm_env or {}).get(V2_RUNNER_ENV, "0") not in ("", "0"):
        yield (
            "vllm_env",
            f"sets {V2_RUNNER_ENV}, but the SM75 patch's default_thinking_token_budget applies on the V1 model runner "
            f"only (vLLM {r.version}'s input_processor.py; V2 also refuses a request's own budget): leave "
            f"{V2_RUNNER_ENV} unset, or set default_thinking_token_budget: null",
        )


# vLLM 0.27.x picks Model Runner V2 for this hybrid model only when this variable asks (config/vllm.py:651-654).
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


CUDA12_LANE = re.compile(r"/cu12\d+/?$")


def _compile_problems(s: Settings):
    """upstream_build compile: a release whose source archive is recorded, and a torch lane the card's CUDA 12
    toolkit can compile extensions for (torch's cpp_extension refuses an nvcc of another major version)."""
    try:
        upstream_compile.sdist(s.vllm_version)
    except ValueError as err:
        yield "upstream_build", str(err)
    if not CUDA12_LANE.search(s.torch_index_url):
        yield (
            "torch_index_url",
            f"must name a CUDA 12 lane (.../cu128/) with upstream_build compile: the card's CUDA {s.cuda_version} "
            f"compiles vLLM and its extensions, and PyPI's torch is a CUDA 13 build; got {s.torch_index_url}",
        )


def _fork_fp8_kv_line(s: Settings, why: str) -> tuple[str, str]:
    return (
        "flashinfer_version",
        f"cannot serve an FP8 KV cache on a 2080 Ti: {why}; use a FlashInfer from 0.6.16 (the merged SM75 fix, "
        "null for the fork's default), or kv_cache_dtype auto (FP16 KV)",
    )


def _upstream_fp8_kv_line(s: Settings, why: str) -> tuple[str, str]:
    return (
        "vllm_version",
        f"{s.vllm_version} cannot serve an FP8 KV cache on a 2080 Ti: its pin, {why}; use vllm_version "
        f"{upstream_releases.DEFAULT} (FlashInfer with the merged SM75 fix), or kv_cache_dtype auto (FP16 KV)",
    )


def _compile_kind_problems(s: Settings) -> Iterator[tuple[str, str]]:
    yield from _unpinned_sources(s)
    yield from _upstream_problems(s, _compile_problems)


@dataclass(frozen=True)
class KindRules:
    """The settings rules that differ by runtime kind (Settings.runtime; vllm_rig/stages/runtime/kinds/ holds the
    rest of each kind: settings are checked here, before any stage is imported)."""

    own: Callable[[Settings], Iterator[tuple[str, str]]]  # said before FlashInfer's rules
    fp8_kv_line: Callable[[Settings, str], tuple[str, str]]  # refuses an FP8 KV cache: the setting to change
    # FlashInfer needs a flashinfer_requirement_overrides entry: pip resolves it beside the source tree's own set
    flashinfer_listed: bool = False


KIND_RULES = {
    "fork": KindRules(lambda s: iter(()), _fork_fp8_kv_line, flashinfer_listed=True),
    "upstream-wheel": KindRules(_upstream_problems, _upstream_fp8_kv_line),
    "upstream-compile": KindRules(_compile_kind_problems, _upstream_fp8_kv_line),
}


def _cross_rule_problems(s: Settings):
    """Yield (key, message) for each cross-field rule the settings break."""
    if s.model != DEFAULT_MODEL and s.model not in s.models:
        yield "model", f'must be "default" or a name in models ({", ".join(s.models) or "none"})'
    if s.secure_boot_mok_enrollment == "deploy_stages" and s.secure_boot_mok_password is None:
        yield (
            "secure_boot_mok_password",
            "must be set when secure_boot_mok_enrollment is deploy_stages (MokManager asks for it at the console)",
        )
    if s.tensor_parallel_size > s.gpu_count:
        yield (
            "tensor_parallel_size",
            f"is {s.tensor_parallel_size} but gpu_count is {s.gpu_count}; must be <= gpu_count",
        )
    elif s.device_ids is not None:  # (checked only once the sizes agree: one cause, one line)
        if len(s.device_ids) != s.tensor_parallel_size or len(set(s.device_ids)) != len(s.device_ids):
            yield "device_ids", f"must list {s.tensor_parallel_size} distinct GPU indexes (tensor_parallel_size)"
        elif max(s.device_ids) >= s.gpu_count:
            yield "device_ids", f"must be GPU indexes below gpu_count ({s.gpu_count})"
    if not s.enable_chunked_prefill and s.max_num_batched_tokens < s.max_model_len:
        yield (
            "max_num_batched_tokens",
            "must be >= max_model_len when enable_chunked_prefill is false (or turn chunked prefill on)",
        )
    slots = s.max_num_seqs * (1 + s.num_speculative_tokens)
    if max(s.cudagraph_capture_sizes) != slots:
        yield (
            "cudagraph_capture_sizes",
            f"largest size must be max_num_seqs x (1 + num_speculative_tokens) = {slots}",
        )
    if s.gpu_wait_timeout_s + 60 > s.service_start_timeout_s:
        yield (
            "gpu_wait_timeout_s",
            f"must leave a minute of service_start_timeout_s ({s.service_start_timeout_s} s) for the start itself",
        )
    if not s.allow_plain_http_mirrors:
        for key, _url in plain_http_mirrors(s):
            yield (
                key,
                "is plain http://: anyone on the way can change what the hosts install and run as root; use "
                "https://, or set allow_plain_http_mirrors: true on a trusted LAN",
            )
    plain_http = s.runtime_artifact_store.startswith("http://")
    if s.runtime_artifacts and plain_http and not s.runtime_artifact_store_allow_http:
        yield (
            "runtime_artifact_store",
            "is http://: its password would cross the network in clear and anyone on the way could change what the "
            "hosts install; use https:// (runtime_artifact_store_ca for your own CA), or set "
            "runtime_artifact_store_allow_http: true",
        )
    if s.gpu_power_limit_min_w > s.gpu_power_limit_max_w:
        yield "gpu_power_limit_min_w", "must not exceed gpu_power_limit_max_w"
    limit = s.gpu_power_limit_w
    if limit is not None and not s.gpu_power_limit_min_w <= limit <= s.gpu_power_limit_max_w:
        yield (
            "gpu_power_limit_w",
            f"must be null or from {s.gpu_power_limit_min_w} to {s.gpu_power_limit_max_w} W (the card's range)",
        )
    rules = KIND_RULES[s.runtime]
    kind_lines = list(rules.own(s))
    yield from kind_lines
    fix_problem = any(key == "flashinfer_version" for key, _ in kind_lines)  # one line: the pin it must be
    try:
        if not fix_problem:
            flashinfer_fix.resolve(s.flashinfer_version, s.flashinfer_sm75_fix)
    except ValueError as err:
        fix_problem = True
        # Blame the version when no fix exists for it at all, else the choice of fix.
        unfixable = flashinfer_fix.needs_fix(s.flashinfer_version) and not flashinfer_fix.patch_for(
            s.flashinfer_version
        )
        yield ("flashinfer_version" if unfixable else "flashinfer_sm75_fix"), str(err)
    yield from _patch_data_problems(s)
    if not fix_problem:
        yield from _fp8_kv_problems(s, rules)
    known = s.flashinfer_requirement_overrides
    listed = any(Version(key) == Version(s.flashinfer_version) for key in known)
    if rules.flashinfer_listed and not fix_problem and not listed:
        yield (
            "flashinfer_version",
            f"has no entry in flashinfer_requirement_overrides (releases whose requirement set pip resolves beside "
            f"the fork's: {', '.join(known) or 'none'}); add one after checking it with the real-resolver test",
        )
    if s.nvidia_keep_archive_driver and s.nvidia_driver_replace_existing:
        yield "nvidia_keep_archive_driver", "cannot be true together with nvidia_driver_replace_existing: pick one"
    min_driver = MIN_DRIVER_FOR_CUDA.get(s.cuda_version)
    if min_driver and Version(s.nvidia_driver_version) < min_driver:
        yield "nvidia_driver_version", f"must be >= {min_driver} for CUDA {s.cuda_version}"
    yield from _lan_problems(s)
    yield from _keys_task_problems(s)
    yield from _chat_page_problems(s)


def _keys_task_problems(s: Settings):
    if s.keys_action != "list" and s.keys_name is None:
        yield "keys_name", f"must name the key to {s.keys_action} (bin/rig keys {s.keys_action} NAME)"


def _key_name_problem(name: str) -> None:
    if not KEY_NAME.match(name) or name == "server":
        raise ValueError(
            f"{name!r} is not a key name: a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32), "
            'not "server" (the server\'s own key)'
        )


def _chat_page_problems(s: Settings):
    """chat_page and what it needs: nginx in front, a Python Open WebUI runs on, a port of its own."""
    if not s.chat_page:
        return
    if s.lan_serving != "proxy":
        yield "chat_page", "needs lan_serving: proxy (nginx serves the page with the LAN's TLS and client networks)"
    elif s.lan_tls != "local_ca":
        # Its requests go to https://localhost:<lan_port>, checked against the one CA it trusts: the box's own,
        # whose certificate names localhost. An owner's certificate names the box's LAN name, from a CA the box
        # does not hold.
        yield (
            "chat_page",
            "needs lan_tls: local_ca (the page reaches the server through nginx at https://localhost:<lan_port> "
            "and trusts the box's own CA, whose certificate names localhost; your certificate need not)",
        )
    if s.python_version not in CHAT_PAGE_PYTHONS:
        yield (
            "python_version",
            f"must be {' or '.join(CHAT_PAGE_PYTHONS)} when chat_page is true (Open WebUI requires "
            f"Python >=3.11,<3.13); got {s.python_version}",
        )
    taken = {s.lan_port: "lan_port", s.vllm_port: "vllm_port"}
    if s.front_of:  # the front listens on front_port only when it fronts boxes
        taken.setdefault(s.front_port, "front_port")
    for key in ("chat_page_port", "chat_page_backend_port"):
        port = getattr(s, key)
        if port in taken:
            yield key, f"must differ from {taken[port]} ({port})"
        taken[port] = key
    if s.chat_page_torch_index_url is None and chat_page_torch_index(s) is None:
        yield (
            "chat_page_torch_index_url",
            f"must be set: torch_index_url ({s.torch_index_url}) names no lane such as /cu128/ to swap for /cpu/",
        )


# Open WebUI 0.12.4's Requires-Python (its wheel's METADATA): >=3.11, <3.13.0a1.
CHAT_PAGE_PYTHONS = ("3.11", "3.12")


def chat_page_torch_index(s: Settings) -> str | None:
    """Where the chat page's CPU torch comes from: the setting, or torch_index_url's lane swapped for cpu."""
    if s.chat_page_torch_index_url:
        return s.chat_page_torch_index_url
    swapped, n = re.subn(r"/(cu\d+|rocm[\d.]+|xpu|cpu)(/?)$", r"/cpu\2", s.torch_index_url)
    return swapped if n else None


def _lan_problems(s: Settings):
    """lan_serving and what it needs: a loopback server and a key behind the proxy, a certificate to serve."""
    if s.lan_serving == "proxy":
        if s.vllm_host is not None and not ipaddress.ip_address(s.vllm_host).is_loopback:
            yield (
                "vllm_host",
                f"must be null or a loopback address when lan_serving is proxy (the proxy serves the LAN); "
                f"set lan_serving: direct to have the server itself listen on {s.vllm_host}",
            )
        if s.vllm_api_key != "auto":
            yield "vllm_api_key", "must be auto when lan_serving is proxy: the proxy asks for the key on every path"
        if s.lan_port == s.vllm_port:
            yield "lan_port", f"must differ from vllm_port ({s.vllm_port}): the server keeps that port on loopback"
    elif s.keys_action != "list":
        yield (
            "keys_action",
            "needs lan_serving: proxy: client keys are nginx's (with direct the server's key is the one)",
        )
    elif s.api_keys:
        yield (
            "api_keys",
            "needs lan_serving: proxy (nginx checks the clients' keys): with direct the server's own key is the "
            "only one, as vLLM 0.27.1 takes more only as --api-key arguments, which every user of the box reads in ps",
        )
    if s.front_of:
        yield from _front_problems(s)
    given = [key for key in ("lan_tls_cert_file", "lan_tls_key_file") if getattr(s, key) is not None]
    if s.lan_tls == "local_ca" and given:
        yield given[0], "is set but lan_tls is local_ca: set lan_tls: own to serve your certificate"
    elif s.lan_tls == "own" and s.lan_serving == "proxy" and len(given) < 2:
        missing = next(key for key in ("lan_tls_cert_file", "lan_tls_key_file") if key not in given)
        yield missing, "must be set when lan_tls is own (the certificate and its private key, PEM files)"


def _front_problems(s: Settings):
    """A front (front_of) serves beside its box's proxy, with its certificate and key check."""
    if s.lan_serving != "proxy" or s.lan_tls != "local_ca":
        yield (
            "front_of",
            "needs lan_serving: proxy and lan_tls: local_ca on this box (the front serves with the box's "
            "certificate and checks its key; each box's certificate is checked against that box's own CA)",
        )
    if s.front_port in (s.lan_port, s.vllm_port):
        yield "front_port", f"must differ from lan_port ({s.lan_port}) and vllm_port ({s.vllm_port})"


def _fp8_kv_problems(s: Settings, rules: KindRules):
    """An FP8 KV cache needs a FlashInfer whose head-size-256 prefill fits SM75 with 1-byte KV (flashinfer_fix)."""
    if not s.kv_cache_dtype.startswith("fp8") or flashinfer_fix.fp8_kv_fits(s.flashinfer_version, s.flashinfer_patch()):
        return
    why = (
        f"FlashInfer {s.flashinfer_version}'s head-size-256 prefill does not fit SM75's 64 KiB shared memory with an "
        f"FP8 KV cache (kv_cache_dtype {s.kv_cache_dtype}): PR 3621 shrinks its tile to one the release refuses for "
        "FP8 KV"
    )
    yield rules.fp8_kv_line(s, why)


def _patch_data_problems(s: Settings):
    """The patch the settings pick must have its fixed files' URLs and hashes in flashinfer_sm75_patches."""
    try:
        patch = flashinfer_fix.resolve(s.flashinfer_version, s.flashinfer_sm75_fix)
    except ValueError:
        return  # reported above
    if patch is None:
        return
    entry = _patch_entry(s.flashinfer_sm75_patches, s.flashinfer_version)
    if entry is None:
        yield (
            "flashinfer_sm75_patches",
            f"has no entry for FlashInfer {s.flashinfer_version}, which takes {patch}: add each fixed header's URL "
            "and its sha256 before and after",
        )
    elif entry["patch"] != patch:
        yield (
            "flashinfer_sm75_patches",
            f"entry for {s.flashinfer_version} names {entry['patch']}, but that release takes {patch}",
        )


FETCHCONTENT_KEYS = {"repo", "ref", "env", "min_arch"}
CMAKE_VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _fetchcontent_problem(entry: Any) -> str | None:
    """What is wrong with one fetchcontent_sources entry, or None."""
    if not isinstance(entry, dict) or not {"repo", "ref", "env"} <= set(entry) or set(entry) - FETCHCONTENT_KEYS:
        return 'must be {"repo": ..., "ref": ..., "env": ..., "min_arch": ...} ("min_arch" may be left out)'
    try:
        _check_url(str(entry["repo"]))
    except ValueError:
        return '"repo" must be an http:// or https:// git URL'
    problem = git_tags.ref_problem(str(entry["ref"]), str(entry["repo"]))
    if problem:
        return f'"ref": {problem}'
    if not CMAKE_VARIABLE.match(str(entry["env"])):
        return '"env" must be a variable name such as FLASH_MLA_SRC_DIR'
    min_arch = entry.get("min_arch")
    if min_arch is not None and not re.match(r"^\d+\.\d$", str(min_arch)):
        return '"min_arch" must be null or a compute capability such as "8.0"'
    return None
