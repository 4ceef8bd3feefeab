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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired

from packaging.version import Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

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
from vllm_rig.setting_types import (
    BenchLabel,
    BenchSizes,
    BoxPath,
    Commit,
    CompileSources,
    ComputeCapability,
    ControlPath,
    DnsOrIp,
    DriverVersion,
    FetchSources,
    FlashInferPatches,
    GitRef,
    GitUrl,
    HfToken,
    HostName,
    InventoryName,
    IpAddress,
    KeyFingerprint,
    KeyName,
    MirrorPrefix,
    MokPassword,
    Networks,
    NumberAsText,
    Pep440,
    Port,
    PositiveInt,
    ReleaseLine,
    RepoId,
    RequirementOverrides,
    Rule,
    ServedName,
    Sha256,
    Sm75PatchFiles,
    Switch,
    UnitName,
    Url,
    UserPassword,
    artifact_store_problem,
    between,
    distinct,
    locks_dir_problem,
    pinned_in,
    refusing,
)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*(=.*)?$")
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


# The model catalogue (`models`, chosen by `model`): what an entry names, and the server settings that may go
# with a model in its "flags" (those of the service's flags that depend on the checkpoint, not on the box).
DEFAULT_MODEL = "default"
MODEL_ENTRY_KEYS = {
    "repo": "model_repo",
    "revision": "model_revision",
    "dir": "model_dir",
    "served_name": "served_model_name",
}
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
ModelName = Annotated[
    str,
    Rule(
        '1-64 letters, digits, dots, dashes or underscores, not "default" (the model of the model_repo, '
        "model_revision, model_dir and served_model_name settings)",
        lambda v: v != DEFAULT_MODEL and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", v),
    ),
]


@with_config(ConfigDict(extra="forbid", strict=True))
class ModelEntry(TypedDict):
    """A catalogue entry: its values are checked as the settings they set (validation's catalogue lines)."""

    repo: str
    revision: NotRequired[str]
    dir: str
    served_name: str
    flags: NotRequired[
        Annotated[
            dict[str, Any],
            Rule(
                "server settings that go with a model: " + ", ".join(MODEL_FLAG_KEYS),
                lambda v: set(v) <= set(MODEL_FLAG_KEYS),
            ),
        ]
        | None
    ]


CATALOGUE: TypeAdapter[dict[str, ModelEntry]] = TypeAdapter(dict[ModelName, ModelEntry])


def _setting(description: str, allowed: str | None = None) -> Any:
    """Field metadata, the one place a setting is described: `description` is the line that says what it
    is (group_data/all.py's comment on its default, the settings table's "what it is" (docs/settings.md)), `allowed` the
    sentence that says what it accepts (error lines, the table's "allowed") where its type's (setting_types) is not
    the whole story."""
    return Field(description=description, json_schema_extra={"allowed": allowed} if allowed else None)


class Settings(BaseModel):
    """Every setting of the rig. Field order follows the deploy's stages; each `# ---- <stage>` comment
    below names the stage of the fields under it (group_data/all.py's headings and the settings table
    follow it: vllm_rig/settings_doc.py)."""

    # strict: "on", "yes" or "8000" (a string) are typos here, not values; pyinfra's --data and YAML
    # already give real booleans and numbers.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    # ---- connection
    ssh_tcp_nodelay: Switch = _setting("TCP_NODELAY on SSH sockets: no ~40 ms stall per remote command")

    # ---- preflight: what the box must have
    gpu_count: Annotated[int, between(1, 8)] = _setting(
        "GPUs the box must show (lspci before the driver, nvidia-smi after)"
    )
    gpu_min_memory_mib: Annotated[int, between(1024, None, "an integer of MiB")] = _setting(
        "least memory per GPU in MiB (a 22 GB 2080 Ti reports 22528)"
    )
    gpu_compute_capability: Annotated[ComputeCapability, NumberAsText] = _setting(
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
    nvidia_repo_url: Url = _setting(
        "NVIDIA's CUDA apt repository: the driver and the toolkit come from it",
        "an http(s) URL; {distro} is replaced by e.g. ubuntu2404",
    )
    nvidia_repo_key_fingerprint: KeyFingerprint = _setting(
        "the one key NVIDIA's keyring package may hold, checked before it is installed"
    )
    nvidia_driver_version: DriverVersion = _setting("exact driver version, pinned and held (the reference setup's)")
    nvidia_driver_flavor: Literal["proprietary", "open"] = _setting(
        "kernel module flavour: proprietary, or open (Turing+ only)", '"proprietary" or "open"'
    )
    nvidia_driver_replace_existing: Switch = _setting(
        "replace an installed driver of another version (never by default)"
    )
    secure_boot_mok_enrollment: Literal["by_hand", "deploy_stages"] = _setting(
        "Secure Boot, DKMS key not enrolled: by_hand (stop with steps) or deploy_stages", '"by_hand" or "deploy_stages"'
    )
    secure_boot_mok_password: MokPassword | None = _setting(
        "one-time MokManager password for deploy_stages; kept secret",
        "null or a one-time MokManager password (1 to 256 characters)",
    )
    nvidia_keep_archive_driver: Switch = _setting(
        "keep Ubuntu's archive driver and Canonical's signed modules: no DKMS swap"
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
    reboot_timeout_s: Annotated[int, between(60, 3600, "seconds")] = _setting(
        "how long to wait for a rebooted host to come back"
    )
    driver_reboot: Literal["auto", "ask"] = _setting(
        "auto: reboot the box once when the driver needs it; ask: stop and let the owner reboot it",
        '"auto" (the deploy reboots the box) or "ask" (the host stops with "reboot the box, then run again")',
    )

    # ---- cuda
    cuda_version: Annotated[Literal["12.8", "12.9"], NumberAsText] = _setting(
        "CUDA toolkit major.minor, pinned (cuda-toolkit-12-9)",
        '"12.8" or "12.9": the fork\'s v0.1.x line builds against torch cu128 and FlashInfer needs CUDA >= 12.8',
    )

    # ---- runtime
    install_root: BoxPath = _setting("venvs, sources and runtimes live under here")
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
    vllm_wheel_sha256: Sha256 | None = _setting(
        "upstream: sha256 of the release's wheel; None: PyPI's, as the table records it",
        "null (PyPI's file, from vllm_rig/known/upstream_releases.py) or a 64-hex-digit sha256",
    )
    vllm_sdist_sha256: Sha256 | None = _setting(
        "upstream compile: sha256 of the release's source archive; None: PyPI's, as recorded",
        "null (PyPI's file, from vllm_rig/known/upstream_compile.py) or a 64-hex-digit sha256",
    )
    upstream_compile_sources: CompileSources | None = _setting(
        "upstream compile: what the release's CMake fetches; None: its own pins",
        "null (the release's CMake pins, vllm_rig/known/upstream_compile.py) or a mapping as fetchcontent_sources "
        'that names "cutlass" and "triton_kernels"',
    )
    sm75_patch_files: Sm75PatchFiles | None = _setting(
        "upstream: the SM75 patches' URLs and sha256; None: zyYuc's at aa935db (raw content)",
        'null (zyYuc/qwen3-8-27b-dual-2080ti-vllm@aa935db, git_mirror_prefix in front) or {"vllm": {"url": an '
        'http(s) URL, "sha256": 64 hex digits}, "flashqla": {...}}',
    )
    python_version: Annotated[Literal["3.10", "3.11", "3.12", "3.13"], NumberAsText] = _setting(
        "Python of the venv (Ubuntu 24.04's python3)", 'one of "3.10" to "3.13"'
    )
    torch_version: Pep440 = _setting(
        "torch; None: the kind's (upstream: the release's pin, PyPI CUDA 13.0; fork: 2.11.0+cu128)",
        "null (the runtime kind's own) or a PEP 440 version such as 2.13.0",
    )
    torchvision_version: Pep440 = _setting(
        "torchvision (Qwen3.x processors need it); None: the kind's (release pin; fork 0.26.0)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    torchaudio_version: Pep440 = _setting(
        "torchaudio; None: the kind's (the release's pin; fork 2.11.0)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    triton_version: Pep440 = _setting(
        "triton; None: the kind's (the pin of the release's torch; fork 3.6.0, the reference setup's)",
        "null (the runtime kind's own) or a PEP 440 version",
    )
    transformers_version: Pep440 = _setting("transformers, pinned to the reference setup's")
    numpy_version: Pep440 = _setting("numpy, pinned to the reference setup's")
    flashinfer_version: Pep440 = _setting(
        "flashinfer-python; None: the kind's (the release's pin; fork 0.6.16, SM75 fix merged)",
        "null (the runtime kind's own) or a FlashInfer release listed in flashinfer_requirement_overrides",
    )
    flashinfer_requirement_overrides: RequirementOverrides = _setting(
        "per FlashInfer release: fork requirements replaced for pip (others refused)",
        "a mapping FlashInfer version -> {package: PEP 440 specifier} that replaces the fork's requirement "
        'for that package, e.g. {"0.6.14": {"nvidia-cutlass-dsl": "==4.5.2"}}',
    )
    flashinfer_sm75_fix: Literal["auto", "pr3621", "upstream", "none"] = _setting(
        "SM75 fix: auto (by version), pr3621, upstream (PR 3526) or none", '"auto", "pr3621", "upstream" or "none"'
    )
    fork_repo: GitUrl = _setting("the vLLM SM75 fork")
    fork_ref: Commit = _setting("pinned commit on the fork's v0.1.x line")
    flashqla_repo: GitUrl = _setting("FlashQLA with the SM70/SM75 GDN kernel")
    flashqla_ref: Commit = _setting("pinned FlashQLA commit")
    cutlass_repo: GitUrl = _setting("CUTLASS sources, fetched before the build")
    cutlass_ref: Annotated[str, pinned_in("NVIDIA/cutlass")] = _setting(
        "CUTLASS v4.4.2 (the fork's build.sh), as a commit", "a 40-character commit SHA (a tag can move)"
    )
    triton_src_repo: GitUrl = _setting("triton_kernels sources, fetched before the build")
    triton_src_ref: Annotated[str, pinned_in("triton-lang/triton")] = _setting(
        "Triton v3.6.0 (the fork's build.sh), as a commit", "a 40-character commit SHA (a tag can move)"
    )
    fetchcontent_sources: FetchSources = _setting(
        "what the fork's CMake fetches in the compile: fetched ahead via the git cache, by variable",
        'a mapping name -> {"repo": a git URL, "ref": a 40-character commit SHA (a tag can move), "env": the '
        'variable the fork\'s CMake reads for a local source, "min_arch": null or the lowest compute capability '
        "the fork's CMake fetches it for}",
    )
    flashinfer_sm75_patches: FlashInferPatches = _setting(
        "per FlashInfer release: its SM75 fix as fixed headers (raw URL, sha256 before/after)",
        'a mapping FlashInfer version -> {"patch": "pr3621" or "pr3526", "files": {path: {"url": the fixed '
        'file\'s http(s) URL (raw content at a commit), "before": sha256, "after": sha256}}}',
    )
    git_mirror_prefix: MirrorPrefix = _setting(
        'put in front of every git URL (e.g. a GitHub proxy); "" for direct',
        '"" or a URL ending in "/" put in front of every git URL',
    )
    pip_index_url: Url | None = _setting(
        "Python package index for pip; None uses pip's default (PyPI)", "null (pip's default index) or an http(s) URL"
    )
    torch_index_url: Url = _setting(
        "torch wheel index, CUDA 12.8 lane", "an http(s) URL of a torch wheel index (e.g. the cu128 lane)"
    )
    locks_dir: Annotated[str, refusing(locks_dir_problem)] = _setting(
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
    build_timeout_s: Annotated[int, between(300, None, "seconds")] = _setting(
        "give up on a build after this many seconds"
    )
    force_rebuild: Switch = _setting("build a new runtime even when the fingerprint matches")
    fork_release_line: ReleaseLine = _setting(
        "the fork's line fork_ref follows: tasks/fork_releases.py lists its newer v0.1.N tags"
    )
    fork_update_margin_pct: Annotated[float, Field(ge=0, le=50)] = _setting(
        "tasks/update_fork.py switches only if decode and prefill are at most this % slower",
        "percent (0 to 50) a new fork release's decode and prefill may be below the running one's and still switch",
    )
    runtime_artifacts: Switch = _setting("keep each compiled runtime by fingerprint; same-fingerprint hosts install it")
    runtime_artifact_store: Annotated[str, refusing(artifact_store_problem)] = _setting(
        "control-machine directory (relative to the repo) or http(s) WebDAV URL",
        'a directory on the control machine, or an http(s) URL of a WebDAV PUT store: a host, a path ending in "/"',
    )
    runtime_artifact_store_auth: UserPassword | None = _setting(
        "user:password for the http(s) store; kept secret, None: ~/.netrc or none",
        "null or user:password (one line)",
    )
    runtime_artifact_store_ca: ControlPath | None = _setting(
        "PEM CA bundle for an https store's certificate; None: the system's CAs",
        "null or the path, on the control machine, of a PEM CA bundle",
    )
    runtime_artifact_store_allow_http: bool = _setting(
        "accept an http:// store (password in clear, artifacts changeable); warns",
        "true or false (false: an http:// runtime_artifact_store is refused; use https://)",
    )
    runtime_artifact_key: ControlPath = _setting(
        "control-machine ed25519 key signing stored artifacts; made on first use",
        "a path on the control machine (relative to the repo), of a PEM private key or where one is made",
    )
    runtime_artifacts_keep: Annotated[int, between(1, 100)] = _setting(
        "how many runtime artifacts the store keeps (the newest)"
    )

    # ---- model
    hf_endpoint: Url = _setting(
        "Hugging Face endpoint or mirror (the reference setup's mirror)",
        "an http(s) URL of a Hugging Face endpoint or mirror",
    )
    hf_verify_endpoint: Url | None = _setting(
        "a second endpoint the model's file hashes must match when reachable; None: hf_endpoint only",
        "null or an http(s) URL of a Hugging Face endpoint or mirror",
    )
    hf_token: HfToken | None = _setting(
        "Hugging Face token for gated repos; kept secret, None sends none", "null or a Hugging Face token"
    )
    hf_disable_xet: Switch = _setting("plain HTTP downloads (mirrors rarely serve Xet)")
    model_repo: RepoId = _setting("closest public id to the reference setup's model")
    model_revision: GitRef = _setting("branch, tag or commit; the resolved commit is recorded on the host")
    model_dir: BoxPath = _setting("where the checkpoint lives")
    download_timeout_s: Annotated[int, between(60, None, "seconds")] = _setting(
        "give up on the download after this many seconds"
    )
    model_peers: bool = _setting(
        "fetch the model from another host of the run that holds it (or fetches it first), over the LAN",
        "true (hosts of one run with the same model fetch it from one of them) or false (each from hf_endpoint)",
    )
    model_peer_address: HostName | None = _setting(
        "the address the other hosts reach this one at for the model; None: its ssh_hostname",
        "null (the host's ssh_hostname) or a host name or IP address",
    )
    model_peer_port: Port = _setting("the port this host serves its model on while other hosts fetch it")
    model_peer_wait_s: Annotated[int, between(10, None, "seconds")] = _setting(
        "how long a host waits for its peer to hold the model (at most half of download_timeout_s)"
    )
    model: str = _setting(
        'the model served: "default" (the four settings above) or a name in models',
        '"default" (the model_repo, model_revision, model_dir and served_model_name settings) or a name in models',
    )
    models: dict[ModelName, ModelEntry] = _setting(
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
    service_name: UnitName = _setting("systemd unit name (vllm.service)")
    service_user: UnitName = _setting("system user the server runs as")
    service_start_timeout_s: Annotated[int, between(60, 7200, "seconds")] = _setting(
        "TimeoutStartSec: the first start compiles for minutes"
    )
    service_restart_sec: Annotated[int, between(0, 600, "seconds")] = _setting("RestartSec between restarts")
    vllm_log_file: BoxPath | None = _setting(
        "None logs to the journal; a path appends there like the reference setup's unit",
        "null (the journal) or an absolute path (letters, digits, . _ + @ - /)",
    )
    start_check_attempts: Annotated[int, between(1, 10)] = _setting(
        "starts in a row whose known-answer check may fail before the service stays down"
    )
    start_check_needle_words: Annotated[int, between(100, 60000)] = _setting(
        "words of the needle check's long prompt (~8K tokens)"
    )
    start_check_kv_shrink_share: Annotated[float, Field(gt=0, lt=1)] = _setting(
        "a KV cache this share below the recorded one restarts the start once, then warns",
        "a share between 0 and 1",
    )
    gpu_wait_timeout_s: Annotated[int, between(0, 3600, "seconds")] = _setting(
        "how long a start waits for free GPUs before it fails naming what holds them"
    )
    gpu_wait_max_used_mib: Annotated[int, between(0, 65536, "MiB")] = _setting(
        "memory a GPU may have in use and still count as free (any compute process holds it)"
    )
    # A desktop's display server puts graphics contexts on the cards: Xorg and gnome-shell, 4-9 MiB each on
    # 2080 Ti desktops (issue 36), 45 MiB together in tests/unit/fixtures/tool_outputs/desktop-postgres. 64
    # covers them; a busier session (nvitop-152's X and gnome-shell: 98 MiB) holds the card until raised.
    # gpu_wait.py names what it allows, and refuses any compute process whatever this says.
    gpu_wait_graphics_max_mib: Annotated[int, Field(ge=0, le=4096)] = _setting(
        "MiB a desktop's graphics may hold per GPU (Xorg, gnome-shell: display, not compute)",
        "MiB from 0 (none) to 4096",
    )
    watchdog_enabled: Switch = _setting(
        "a timer asks the server a known-answer question every watchdog_interval_s; false: off"
    )
    watchdog_interval_s: Annotated[int, between(30, 86400, "seconds")] = _setting("seconds between watchdog rounds")
    watchdog_failures: Annotated[int, between(1, 100)] = _setting(
        "failed rounds in a row before the watchdog restarts the service"
    )
    watchdog_max_restarts: Annotated[int, between(0, 100)] = _setting(
        "watchdog restarts in a row without a passing round before it gives up"
    )
    watchdog_timeout_s: Annotated[int, between(5, 3600, "seconds")] = _setting(
        "how long a watchdog round waits for its answer"
    )
    served_model_name: ServedName = _setting("model name clients ask for")
    vllm_host: IpAddress | None = _setting(
        'bind address; None: 127.0.0.1 behind the proxy, 0.0.0.0 with lan_serving = "direct"',
        "null (127.0.0.1 behind the proxy, 0.0.0.0 with lan_serving: direct) or an IP address to bind",
    )
    vllm_port: Port = _setting("API port")
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
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = _setting(
        "KV cache dtype; auto = FP16 (INT8 is refused)",
        '"auto" (FP16), "fp8", "fp8_e4m3" or "fp8_e5m2"; not int8: an INT8 KV cache collapses MTP acceptance at long '
        "context on SM75 (second setup: 16K -> 12 tok/s)",
    )
    max_model_len: Annotated[int, Field(ge=1024, le=MODEL_CONTEXT_LIMIT)] = _setting(
        "context length in tokens",
        f"an integer from 1024 to {MODEL_CONTEXT_LIMIT} (the model's max_position_embeddings)",
    )
    enable_prefix_caching: Switch = _setting("reuse cached prefixes")
    mamba_cache_mode: Literal["align", "all", "none"] | None = _setting(
        "--mamba-cache-mode (align for prefix caching on hybrid models); None omits", 'null, "align", "all" or "none"'
    )
    max_num_seqs: Annotated[int, between(1, 256)] = _setting("concurrent sequences")
    max_num_batched_tokens: Annotated[int, between(256, None, "an integer")] = _setting("chunked-prefill chunk size")
    enable_chunked_prefill: Switch = _setting("chunked prefill (long contexts OOM without it)")
    async_scheduling: bool | None = _setting(
        "False renders --no-async-scheduling; None leaves the server default", "null (server default), true or false"
    )
    skip_mm_profiling: Switch = _setting("skip multimodal memory profiling")
    reasoning_parser: str | None = _setting(
        "reasoning parser for <think> blocks", "null or a parser name such as qwen3"
    )
    reasoning_config: dict[str, Any] | None = _setting(
        "--reasoning-config: the think-tag markers (the budget is default_thinking_token_budget)",
        "null or a JSON object with the keys " + ", ".join(fork_interface.REASONING_CONFIG_KEYS),
    )
    default_thinking_token_budget: PositiveInt | None = _setting(
        "server-side thinking budget: in --reasoning-config (upstream), an env var (fork)",
        "null (no server-side default) or a positive integer such as 4000 (the reference setup's)",
    )
    default_chat_template_kwargs: dict[str, Any] | None = _setting(
        "--default-chat-template-kwargs", "null or a JSON object"
    )
    enable_auto_tool_choice: Switch = _setting("let the model call tools on its own")
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
    num_speculative_tokens: Annotated[int, Field(ge=1, le=8)] = _setting(
        "MTP draft tokens (MTP is required on this stack)",
        "an integer from 1 to 8: without MTP this hybrid GDN model degrades into garbage output",
    )
    cudagraph_mode: Literal["PIECEWISE"] = _setting(
        "CUDA graph mode (PIECEWISE is the only safe one with MTP here)",
        '"PIECEWISE": with MTP on this stack FULL cudagraphs (FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE) corrupt the '
        "output and NONE (eager) is too slow to serve",
    )
    cudagraph_capture_sizes: Annotated[
        list[PositiveInt],
        Field(min_length=1),
        Rule("a non-empty list of distinct positive integers, e.g. [4]", lambda v: len(set(v)) == len(v)),
    ] = _setting("graph sizes; largest = max_num_seqs x (1 + num_speculative_tokens)")
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
    disable_uvicorn_access_log: Switch = _setting("no per-request access log lines")
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
    lan_port: Port = _setting(
        "the proxy's HTTPS port on every address of the box", "an integer from 1 to 65535, not vllm_port"
    )
    lan_allow: Networks = _setting(
        "client networks; loopback always", 'a list of client networks in CIDR form, e.g. ["192.168.1.0/24"]'
    )
    lan_metrics_allow: Networks = _setting(
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
    lan_tls_cert_file: ControlPath | None = _setting(
        'lan_tls = "own": your PEM certificate (chain), a path on the control machine',
        "null or the path, on the control machine, of a PEM certificate (chain) for lan_tls: own",
    )
    lan_tls_key_file: ControlPath | None = _setting(
        'lan_tls = "own": its PEM private key on the control machine (kept secret; chmod 600)',
        "null or the path, on the control machine, of the certificate's PEM private key for lan_tls: own",
    )
    lan_tls_names: list[DnsOrIp] = _setting(
        "extra DNS names or IPs in the local CA's certificate (the host's name and addresses always are)",
        "a list of extra DNS names or IP addresses (the host's name and addresses are always in the certificate)",
    )
    lan_max_body_mb: Annotated[int, between(1, 1024, "MB")] = _setting(
        "largest request body: a 262K-token prompt as escaped JSON is a few MB, images more"
    )
    lan_read_timeout_s: Annotated[int, between(60, 86400, "seconds")] = _setting(
        "longest silence from the server: a non-streamed answer to a 100K prompt comes at the end"
    )
    front_of: Annotated[list[InventoryName], AfterValidator(distinct)] = _setting(
        "other boxes of the inventory this box also answers for at front_port (one URL; same model on all)",
        "a list of other hosts' inventory names, each serving the same model behind its own proxy",
    )
    front_port: Port = _setting(
        "front_of: the one URL's HTTPS port on this box", "an integer from 1 to 65535, not lan_port or vllm_port"
    )
    api_keys: Annotated[list[KeyName], AfterValidator(distinct)] = _setting(
        "clients' own keys, one per name, each made on the box (sudo cat /etc/vllm-rig/keys/NAME)",
        "a list of distinct key names, each a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32; not "
        '"server"), e.g. ["laptop", "agent", "chat-page"]',
    )
    chat_page: bool = _setting(
        "True: Open WebUI, a chat page for the household, on chat_page_port (docs/chat-page.md)",
        "true (Open WebUI on chat_page_port, behind nginx with the LAN's TLS) or false",
    )
    chat_page_port: Port = _setting(
        "the chat page's HTTPS port (its own: Open WebUI cannot live under a path)",
        "an integer from 1 to 65535, not lan_port, vllm_port, front_port or chat_page_backend_port",
    )
    chat_page_backend_port: Port = _setting(
        "Open WebUI's own port, on loopback only (nginx serves chat_page_port)",
        "an integer from 1 to 65535, not lan_port, vllm_port or chat_page_port",
    )
    chat_page_backups_keep: Annotated[int, between(1, 365)] = _setting(
        "daily copies of the chat page's database kept on the box"
    )
    chat_page_torch_index_url: Url | None = _setting(
        "the chat page's torch index; None: torch_index_url's CPU lane (/cpu/ for /cu128/)",
        "null (torch_index_url with its lane replaced by cpu) or an http(s) URL of a torch wheel index",
    )
    chat_page_index_url: Url | None = _setting(
        "index for Open WebUI and its hash-locked dependencies; None: pip_index_url",
        "null (pip_index_url) or an http(s) URL of a Python package index",
    )

    # ---- verify and bench
    verify_gate: Literal["fail", "warn"] = _setting(
        "a failed verdict gate stops the host (fail) or only warns (warn)",
        '"fail" (a failed gate stops the host) or "warn"',
    )
    verify_bandwidth: Switch = _setting("measure P2P copy and NCCL all-reduce (needs both GPUs free for a minute)")
    verify_min_p2p_gbps: Annotated[float, between(0, None, "GB/s")] = _setting(
        "least P2P copy GB/s each way (2 NVLink2 links: ~40 measured, 50 ceiling)"
    )
    verify_min_allreduce_gbps: Annotated[float, between(0, None, "GB/s")] = _setting(
        "least all-reduce bus GB/s (2 ranks: ceiling ~50; calibrate on your box)"
    )
    bench_sizes: BenchSizes = _setting("the reference setup's runs: TOKENS:RUNS:MAX_TOKENS")
    bench_label: BenchLabel = _setting("label stored with bench results (e.g. FP8-KV, FP16-KV for an A/B)")

    # ---- operating
    status_format: Literal["table", "json"] = _setting(
        "how the status is printed: table, or json (one line per host on stdout)", '"table" or "json"'
    )
    triage_journal_lines: Annotated[int, between(10, 100000, "lines")] = _setting(
        "journal lines of the service and the build in a triage bundle"
    )
    logs_source: Literal["service", "build", "download", "watchdog"] = _setting(
        "whose log tasks/logs.py shows (bin/rig logs SOURCE)", '"service", "build", "download" or "watchdog"'
    )
    logs_lines: Annotated[int, between(1, 100000, "lines")] = _setting(
        "lines of the log tasks/logs.py shows first (bin/rig logs -n)"
    )
    logs_follow: Switch = _setting("tasks/logs.py keeps printing new lines until Ctrl-C (bin/rig logs -f)")
    keys_action: Literal["list", "add", "revoke"] = _setting(
        "what tasks/keys.py does: list the client keys, add or revoke one (bin/rig keys ACTION)",
        '"list", "add" or "revoke"',
    )
    keys_name: KeyName | None = _setting(
        "the key tasks/keys.py adds or revokes (bin/rig keys add NAME)",
        "null or a key name: a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32)",
    )
    remove_model: Switch = _setting("tasks/remove.py also deletes the model directories (bin/rig remove --with-model)")
    remove_driver: Switch = _setting(
        "tasks/remove.py also removes the NVIDIA driver and CUDA (bin/rig remove --with-driver)"
    )
    remove_chat_data: Switch = _setting(
        "tasks/remove.py also deletes the chat page's data (bin/rig remove --with-chat-data)"
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

    # ---- field checks: rules a type alone cannot say (the formats are types: vllm_rig/setting_types.py)

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

    @field_validator("vllm_version")
    @classmethod
    def _vllm_version(cls, value: str) -> str:
        release = upstream_releases.release(value)  # ValueError: not in the table, with the supported ones
        if not release.supported:
            raise ValueError(f"vLLM {value} is not supported: {release.reason}")
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
        files = self.sm75_patch_files
        if files is not None:
            return {
                name: {"url": f["url"], "sha256": f["sha256"]}
                for name, f in (("vllm", files["vllm"]), ("flashqla", files["flashqla"]))
            }
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
        entry = _patch_entry(self.flashinfer_sm75_patches, self.flashinfer_version)
        return None if entry is None else dict(entry)


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
    try:
        entry: dict[str, Any] = dict(CATALOGUE.validate_python({name: models.get(name)})[name])
    except ValidationError:
        return {}  # the models field reports it
    values = {setting: entry[key] for key, setting in MODEL_ENTRY_KEYS.items() if key in entry}
    values.setdefault("model_revision", "main")
    values.update(entry.get("flags") or {})
    return values


def apply_model_choice(data: Mapping[str, Any]) -> dict[str, Any]:
    """Host data with the chosen catalogue entry's values in place of the single-model settings."""
    return {**data, **catalogue_values(data)}


def _patch_entry(patches: Mapping[str, Mapping[str, Any]], version: str) -> Mapping[str, Any] | None:
    """The entry for `version`, matched as a PEP 440 version ("0.6.14" and "0.6.14.0" are one release)."""
    wanted = Version(version)
    return next((entry for key, entry in patches.items() if Version(key) == wanted), None)


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
    # Before validation: no Settings.runtime to ask yet, so a field check reads the kind from the host data.
    if kind == "fork":
        return server_interface.FORK
    try:
        return server_interface.upstream(version) if kind == "upstream" and version else None
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
    # Before validation: no Settings.runtime to ask yet (these defaults are filled in first), so the raw kind.
    if kind != "upstream" or not isinstance(version, str):
        return dict(fork_interface.OWN_SETTINGS) if kind == "fork" else {}
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
