# Every setting of the rig, grouped by stage, one comment line each. The defaults reproduce the reference
# setup (dual RTX 2080 Ti 22 GB, Qwen3.6 27B FP8, FP8 KV, 100K, MTP3, TP2). Override per profile
# group (group_data/<profile>.py), per host (inventory/hosts.yml) or per run (--data KEY=VALUE).
# The schema and its rules: vllm_rig/settings.py. Settings here follow its order under its stage headings,
# each default's comment is its field's description there (a unit test checks both), and the README's
# settings table is generated from the two: python -m vllm_rig.settings_doc --write.

# pyinfra: every operation runs as root through sudo (NOPASSWD, or pass --use-sudo-password).
_sudo = True

# ---- connection: how pyinfra talks to the hosts
ssh_tcp_nodelay = True  # TCP_NODELAY on SSH sockets: no ~40 ms stall per remote command

# ---- preflight: what the box must have
gpu_count = 2  # GPUs the box must show (lspci before the driver, nvidia-smi after)
gpu_min_memory_mib = 22000  # least memory per GPU in MiB (a 22 GB 2080 Ti reports 22528)
gpu_compute_capability = "7.5"  # compute capability every GPU must report (Turing = 7.5)
min_free_disk_gb = None  # free GB needed under install_root; None: by runtime kind (compile 110, upstream wheels 40)
min_ram_gb = 16  # least RAM in GB; the CUDA build needs about 3 GB per compile job
preflight_report = "table"  # how the verdict is printed: table, or json (one line per host)

# ---- driver: NVIDIA's apt repository, pinned and held
nvidia_repo_url = (  # NVIDIA's CUDA apt repository: the driver and the toolkit come from it
    "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/"
)
# NVIDIA's CUDA repository signing key (id 3bf863cc, cudatools@nvidia.com), the same for every distro (the
# public pins of it agree): the keyring package downloaded from nvidia_repo_url must hold it and no other.
nvidia_repo_key_fingerprint = (  # the one key NVIDIA's keyring package may hold, checked before it is installed
    "EB693B3035CD5710E231E123A4B469963BF863CC"
)
nvidia_driver_version = "580.159.03"  # exact driver version, pinned and held (the reference setup's)
nvidia_driver_flavor = "proprietary"  # kernel module flavour: proprietary, or open (Turing+ only)
nvidia_driver_replace_existing = False  # replace an installed driver of another version (never by default)
secure_boot_mok_enrollment = "by_hand"  # Secure Boot, DKMS key not enrolled: by_hand (stop with steps) or deploy_stages
secure_boot_mok_password = None  # one-time MokManager password for deploy_stages; kept secret
nvidia_keep_archive_driver = False  # keep Ubuntu's archive driver and Canonical's signed modules: no DKMS swap
gpu_power_limit_w = None  # power limit in W set at every boot; None keeps the card's default
gpu_power_limit_min_w = 100  # lowest limit the card accepts (stock 2080 Ti BIOS)
gpu_power_limit_max_w = 320  # highest limit the card accepts (stock 2080 Ti FE BIOS)
reboot_timeout_s = 600  # how long to wait for a rebooted host to come back
driver_reboot = "auto"  # auto: reboot the box once when the driver needs it; ask: stop and let the owner reboot it

# ---- cuda: the toolkit the fork and FlashInfer's JIT compile with
cuda_version = "12.9"  # CUDA toolkit major.minor, pinned (cuda-toolkit-12-9)

# ---- runtime: venv, the fork, FlashInfer, FlashQLA
install_root = "/opt/vllm-rig"  # venvs, sources and runtimes live under here
runtime_kind = "upstream"  # upstream: vLLM's release + its first owner's SM75 patch; fork: weicj's fork
upstream_build = "wheel"  # upstream: wheel = the release's kernels (minutes); compile = its sdist on CUDA 12.9
vllm_version = "0.27.1"  # upstream: the vLLM release (vllm_rig/known/upstream_releases.py)
vllm_wheel_sha256 = None  # upstream: sha256 of the release's wheel; None: PyPI's, as the table records it
vllm_sdist_sha256 = None  # upstream compile: sha256 of the release's source archive; None: PyPI's, as recorded
upstream_compile_sources = None  # upstream compile: what the release's CMake fetches; None: its own pins
sm75_patch_files = None  # upstream: the SM75 patches' URLs and sha256; None: zyYuc's at aa935db (raw content)
python_version = "3.12"  # Python of the venv (Ubuntu 24.04's python3)
torch_version = None  # torch; None: the kind's (upstream: the release's pin, PyPI CUDA 13.0; fork: 2.11.0+cu128)
torchvision_version = None  # torchvision (Qwen3.x processors need it); None: the kind's (release pin; fork 0.26.0)
torchaudio_version = None  # torchaudio; None: the kind's (the release's pin; fork 2.11.0)
triton_version = None  # triton; None: the kind's (the pin of the release's torch; fork 3.6.0, the reference setup's)
transformers_version = "5.12.1"  # transformers, pinned to the reference setup's
numpy_version = "2.3.5"  # numpy, pinned to the reference setup's
flashinfer_version = None  # flashinfer-python; None: the kind's (the release's pin; fork 0.6.16, SM75 fix merged)
flashinfer_requirement_overrides = {  # per FlashInfer release: fork requirements replaced for pip (others refused)
    "0.6.8.post1": {},  # the fork's own pin: its requirements as they are
    # 0.6.14 and 0.6.15 require nvidia-cutlass-dsl>=4.5.0, the fork pins ==4.4.2 (FA4's CuTe-DSL kernels); pip
    # moves quack-kernels 0.4.1 -> 0.5.0 with it; import flashinfer imports cutlass (the build's check imports it)
    "0.6.14": {"nvidia-cutlass-dsl": "==4.5.2"},
    "0.6.15": {"nvidia-cutlass-dsl": "==4.5.2"},
    # 0.6.16 also requires nvidia-cudnn-frontend>=1.25.0, the fork caps it <1.19.0
    "0.6.16": {"nvidia-cutlass-dsl": "==4.5.2", "nvidia-cudnn-frontend": ">=1.25.0"},
}
flashinfer_sm75_fix = "auto"  # SM75 fix: auto (by version), pr3621, upstream (PR 3526) or none
fork_repo = "https://github.com/weicj/vLLM-2080Ti-Definitive.git"  # the vLLM SM75 fork
fork_ref = "63cfe89659bccc4be0aa284d045dae44477a27f3"  # pinned commit on the fork's v0.1.x line
flashqla_repo = "https://github.com/weicj/FlashQLA-SM70-SM75.git"  # FlashQLA with the SM70/SM75 GDN kernel
flashqla_ref = "3ab27d77d8ca01d7a4718903b726add1a8886c0e"  # pinned FlashQLA commit
cutlass_repo = "https://github.com/NVIDIA/cutlass.git"  # CUTLASS sources, fetched before the build
cutlass_ref = "da5e086dab31d63815acafdac9a9c5893b1c69e2"  # CUTLASS v4.4.2 (the fork's build.sh), as a commit
triton_src_repo = "https://github.com/triton-lang/triton.git"  # triton_kernels sources, fetched before the build
triton_src_ref = "7c56a5e40f7fd928dfd5c72902d5def0097db73a"  # Triton v3.6.0 (the fork's build.sh), as a commit
fetchcontent_sources = {  # what the fork's CMake fetches in the compile: fetched ahead via the git cache, by variable
    "flashmla": {  # cmake/external_projects/flashmla.cmake: upstream reads it before its SM90+ check
        "repo": "https://github.com/vllm-project/FlashMLA.git",
        "ref": "a6ec2ba7bd0a7dff98b3f4d3e6b52b159c48d78b",
        "env": "FLASH_MLA_SRC_DIR",
        "min_arch": None,
    },
    "qutlass": {  # cmake/external_projects/qutlass.cmake: upstream populates it before its SM100+ check
        "repo": "https://github.com/IST-DASLab/qutlass.git",
        "ref": "830d2c4537c7396e14a02a46fbddd18b5d107c65",
        "env": "QUTLASS_SRC_DIR",
        "min_arch": None,
    },
    "vllm-flash-attn": {  # upstream's vllm_flash_attn.cmake fetches it on SM75 too; missing: unknown target _vllm_fa2_C
        "repo": "https://github.com/vllm-project/flash-attention.git",
        "ref": "f5bc33cfc02c744d24a2e9d50e6db656de40611c",
        "env": "VLLM_FLASH_ATTN_SRC_DIR",
        "min_arch": None,
    },
    "deepgemm": {  # fetched below SM90 only by upstream's deepgemm.cmake, and missing it only warns
        "repo": "https://github.com/deepseek-ai/DeepGEMM.git",
        "ref": "891d57b4db1071624b5c8fa0d1e51cb317fa709f",
        "env": "DEEPGEMM_SRC_DIR",
        "min_arch": "9.0",
    },
}
flashinfer_sm75_patches = {  # per FlashInfer release: its SM75 fix as fixed headers (raw URL, sha256 before/after)
    # Each header is fetched whole at a commit through raw content (GitHub proxies of the gh-proxy kind pass
    # raw paths, not compare/commit diffs). The installed header must be "before"; the download must be "after".
    "0.6.14": {  # PR 3621 (closed, unmerged), head b6691f8 (refs/pull/3621/head): its prefill.cuh is blob
        # cb6958855 (sha256 "after"); the base a671c02 and tag v0.6.14 have blob 6185fdeb1 (sha256 "before")
        "patch": "pr3621",
        "files": {
            "include/flashinfer/attention/prefill.cuh": {
                "url": "https://raw.githubusercontent.com/flashinfer-ai/flashinfer/"
                "b6691f83a4a4fcbd95da6beb5e57fb8cfd716df4/include/flashinfer/attention/prefill.cuh",
                "before": "9bb66eeae98340e72a7cef68691d7198a8538d58f2fc64f08f77a314a9f4d98c",
                "after": "3cda6a4f0fed5b3f89686933ecb0b3653ece8db08a7980d991d2192d4d30f784",
            },
        },
    },
    "0.6.15": {  # PR 3526, merged as c18a974: its two headers (blobs 5000fb8c5, 858e4bf2e) are "after"; its
        # parent's (010b8a5b0, f2a8850f7) equal v0.6.15's and are "before". Tag v0.6.16 has the same blobs.
        "patch": "pr3526",
        "files": {
            "include/flashinfer/attention/persistent.cuh": {
                "url": "https://raw.githubusercontent.com/flashinfer-ai/flashinfer/"
                "c18a974a88b8c7da88be0338a7478636f1dffa17/include/flashinfer/attention/persistent.cuh",
                "before": "bb7ebc410f8ff690e8ae6b2d3a65c442404e6f6f9f6e7dc68bf73852a8b3162b",
                "after": "7d029a6b93ad6c05ef75bec420f7b5b475bcdf44630ba2ed43b8b5dd315d6afa",
            },
            "include/flashinfer/attention/prefill.cuh": {
                "url": "https://raw.githubusercontent.com/flashinfer-ai/flashinfer/"
                "c18a974a88b8c7da88be0338a7478636f1dffa17/include/flashinfer/attention/prefill.cuh",
                "before": "5c1f326ea3d59d6216076131479907359e61c3d74ded6dd2a67cb4994e98fdb0",
                "after": "2e5927bdc0d36ddb393cb4fab68c2e958d65d5b4b0085c969f7cfa777ecdfb5b",
            },
        },
    },
}
git_mirror_prefix = ""  # put in front of every git URL (e.g. a GitHub proxy); "" for direct
pip_index_url = None  # Python package index for pip; None uses pip's default (PyPI)
torch_index_url = "https://download.pytorch.org/whl/cu128"  # torch wheel index, CUDA 12.8 lane
locks_dir = "locks"  # hashed locks of every pip install on a box (bin/locks; a missing one: written on first use)
allow_plain_http_mirrors = False  # accept http:// mirrors (index, torch, git, HF, NVIDIA apt) on a trusted LAN; warns
build_max_jobs = "auto"  # compile jobs: auto = min(8, threads, (RAM GB - 3) / 3)
build_timeout_s = 14400  # give up on a build after this many seconds
force_rebuild = False  # build a new runtime even when the fingerprint matches
fork_release_line = "v0.1"  # the fork's line fork_ref follows: tasks/fork_releases.py lists its newer v0.1.N tags
fork_update_margin_pct = 5.0  # tasks/update_fork.py switches only if decode and prefill are at most this % slower
runtime_artifacts = True  # keep each compiled runtime by fingerprint; same-fingerprint hosts install it
runtime_artifact_store = "runtime-artifacts"  # control-machine directory (relative to the repo) or http(s) WebDAV URL
runtime_artifact_store_auth = None  # user:password for the http(s) store; kept secret, None: ~/.netrc or none
runtime_artifact_store_ca = None  # PEM CA bundle for an https store's certificate; None: the system's CAs
runtime_artifact_store_allow_http = False  # accept an http:// store (password in clear, artifacts changeable); warns
runtime_artifact_key = "runtime-artifact.key"  # control-machine ed25519 key signing stored artifacts; made on first use
runtime_artifacts_keep = 3  # how many runtime artifacts the store keeps (the newest)

# ---- model: the FP8 checkpoint through the HF endpoint
hf_endpoint = "https://hf-mirror.com"  # Hugging Face endpoint or mirror (the reference setup's mirror)
hf_verify_endpoint = None  # a second endpoint the model's file hashes must match when reachable; None: hf_endpoint only
hf_token = None  # Hugging Face token for gated repos; kept secret, None sends none
hf_disable_xet = True  # plain HTTP downloads (mirrors rarely serve Xet)
model_repo = "nerkyor/Qwen3.6-27B-DSV4Pro-Thinking-Distill-FP8"  # closest public id to the reference setup's model
model_revision = "main"  # branch, tag or commit; the resolved commit is recorded on the host
model_dir = "/opt/vllm-rig/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8"  # where the checkpoint lives
download_timeout_s = 14400  # give up on the download after this many seconds
model_peers = True  # fetch the model from another host of the run that holds it (or fetches it first), over the LAN
model_peer_address = None  # the address the other hosts reach this one at for the model; None: its ssh_hostname
model_peer_port = 28480  # the port this host serves its model on while other hosts fetch it
model_peer_wait_s = 7200  # how long a host waits for its peer to hold the model (at most half of download_timeout_s)
model = "default"  # the model served: "default" (the four settings above) or a name in models
models = {  # the catalogue: name -> repo, revision, dir, served name and the server flags that go with the model
    "qwen38": {  # the second setup's model and its flags (FP16 KV, 128K, qwen3_xml tools, 2048-token chunks)
        "repo": "Qwen/Qwen3.8-27B-FP8",
        "revision": "main",
        "dir": "/opt/vllm-rig/models/Qwen3.8-27B-FP8",
        "served_name": "qwen38-27b",
        "flags": {
            "kv_cache_dtype": "auto",
            "max_model_len": 131072,
            "mamba_cache_mode": "align",
            "max_num_batched_tokens": 2048,
            "tool_call_parser": "qwen3_xml",
            "generation_config": "vllm",
            "override_generation_config": {"temperature": 0.1},
        },
    },
    # The int4 checkpoint dual-2080 Ti owners serve (Aiakos1818's 256K profile): compressed-tensors W4A16, group
    # 32, asymmetric, ~21.0 GB in 5 shards (tests/unit/checkpoints.py: sizes, source, what is belief).
    "qwen38-awq": {
        "repo": "cyankiwi/Qwen3.8-27B-AWQ-INT4",
        "revision": "main",  # the commit its file list was read at is not known
        "dir": "/opt/vllm-rig/models/Qwen3.8-27B-AWQ-INT4",
        "served_name": "qwen38-27b-awq",
        "flags": {
            "dtype": "half",  # SM75 has no BF16 tensor cores; the W4A16 kernels take FP16 activations
            "quantization": None,  # no --quantization: vLLM reads compressed-tensors from config.json ("fp8" clashes)
            # 262,144 (the model's own limit) fits with FP8 KV: 4.99e9 bytes per card against ~8.3e9 of room at
            # 0.92; FP16 KV would stop at 227,200 (tests/unit/kv_room.py, tests/unit/test_kv_room.py)
            "kv_cache_dtype": "fp8_e4m3",
            "max_model_len": 262144,
            "gpu_memory_utilization": 0.92,
            "mamba_cache_mode": "align",  # prefix caching on the hybrid GDN model (the KV estimate assumes it)
            "max_num_batched_tokens": 2048,  # half the default's activation peak at 262K (~346 MiB per card)
            # MTP stays on (3 tokens): the checkpoint keeps mtp.* unquantized (Aiakos: linear_attn and mtp not
            # quantized, MTP accepted ~79%); a quantization without mtp.* would accept nothing
            "num_speculative_tokens": 3,
            "tool_call_parser": "qwen3_xml",
        },
    },
}
models_keep = 1  # models served before the current one that stay on disk; older ones are removed (space printed)

# ---- service: the systemd unit and the server's flags (the reference setup's unit)
service_name = "vllm"  # systemd unit name (vllm.service)
service_user = "vllm"  # system user the server runs as
service_start_timeout_s = 900  # TimeoutStartSec: the first start compiles for minutes
service_restart_sec = 10  # RestartSec between restarts
vllm_log_file = None  # None logs to the journal; a path appends there like the reference setup's unit
start_check_attempts = 3  # starts in a row whose known-answer check may fail before the service stays down
start_check_needle_words = 6000  # words of the needle check's long prompt (~8K tokens)
start_check_kv_shrink_share = 0.2  # a KV cache this share below the recorded one restarts the start once, then warns
gpu_wait_timeout_s = 120  # how long a start waits for free GPUs before it fails naming what holds them
gpu_wait_max_used_mib = 1024  # memory a GPU may have in use and still count as free (any compute process holds it)
gpu_wait_graphics_max_mib = 64  # MiB a desktop's graphics may hold per GPU (Xorg, gnome-shell: display, not compute)
watchdog_enabled = True  # a timer asks the server a known-answer question every watchdog_interval_s; false: off
watchdog_interval_s = 300  # seconds between watchdog rounds
watchdog_failures = 3  # failed rounds in a row before the watchdog restarts the service
watchdog_max_restarts = 2  # watchdog restarts in a row without a passing round before it gives up
watchdog_timeout_s = 120  # how long a watchdog round waits for its answer
served_model_name = "qwen-local"  # model name clients ask for
vllm_host = None  # bind address; None: 127.0.0.1 behind the proxy, 0.0.0.0 with lan_serving = "direct"
vllm_port = 8000  # API port
vllm_api_key = "auto"  # auto: a key made once on the host; none: serve without a key
tensor_parallel_size = 2  # GPUs one model spans (TP2 over the NVLink pair)
device_ids = [0, 1]  # GPUs the server uses: --device-ids (upstream), CUDA_VISIBLE_DEVICES (fork); None: all
dtype = "half"  # compute dtype; SM75 has no BF16 tensor cores
quantization = "fp8"  # weight quantization (FP8 through Marlin on SM75)
kv_cache_dtype = "fp8_e4m3"  # KV cache dtype; auto = FP16 (INT8 is refused)
max_model_len = 100000  # context length in tokens
enable_prefix_caching = True  # reuse cached prefixes
mamba_cache_mode = None  # --mamba-cache-mode (align for prefix caching on hybrid models); None omits
max_num_seqs = 1  # concurrent sequences
max_num_batched_tokens = 4096  # chunked-prefill chunk size
enable_chunked_prefill = True  # chunked prefill (long contexts OOM without it)
async_scheduling = False  # False renders --no-async-scheduling; None leaves the server default
skip_mm_profiling = True  # skip multimodal memory profiling
reasoning_parser = "qwen3"  # reasoning parser for <think> blocks
reasoning_config = {  # --reasoning-config: the think-tag markers (the budget is default_thinking_token_budget)
    "reasoning_start_str": "<think>",
    "reasoning_end_str": "</think>",
}
default_thinking_token_budget = 4000  # server-side thinking budget: in --reasoning-config (upstream), an env var (fork)
default_chat_template_kwargs = {"enable_thinking": True}  # --default-chat-template-kwargs
enable_auto_tool_choice = True  # let the model call tools on its own
tool_call_parser = None  # tool-call parser; None: the kind's (upstream qwen3_coder as the first setup, fork qwen3_xml)
chat_template_content_format = "string"  # --chat-template-content-format
gpu_memory_utilization = 0.92  # share of GPU memory vLLM may take
additional_config = {"gdn_prefill_backend": "flashqla_legacy"}  # --additional-config (FlashQLA GDN prefill)
num_speculative_tokens = 3  # MTP draft tokens (MTP is required on this stack)
cudagraph_mode = "PIECEWISE"  # CUDA graph mode (PIECEWISE is the only safe one with MTP here)
cudagraph_capture_sizes = [4]  # graph sizes; largest = max_num_seqs x (1 + num_speculative_tokens)
generation_config = None  # --generation-config (auto or vllm); None omits
override_generation_config = {  # sampling defaults the server applies (the reference setup's; presence_penalty dropped)
    "temperature": 0.6,
    "top_p": 0.95,
    "top_k": 20,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.06,
}
cpu_offload_gb = 0  # --cpu-offload-gb; None omits
disable_uvicorn_access_log = True  # no per-request access log lines
omp_num_threads = 8  # OMP_NUM_THREADS for the server; None leaves it unset
vllm_env = {  # the server's environment (SM75 switches from the reference setup's unit)
    "VLLM_USE_DEEP_GEMM": "0",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_QWOPUS_MTP_BF16_DRAFT": "1",
    "VLLM_SM75_SPEC_SYNC_MODE": "safe",
}
vllm_extra_args = []  # extra server flags, e.g. ["--enforce-eager"]

# ---- lan: how the LAN reaches the server (nginx from the distribution in front of it, tasks/lan.py)
lan_serving = "proxy"  # proxy: nginx serves the LAN, the server stays on loopback; direct: the server itself (0.0.0.0)
lan_port = 8443  # the proxy's HTTPS port on every address of the box
lan_allow = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"]  # client networks; loopback always
lan_metrics_allow = []  # who may read /metrics through the proxy besides loopback (a Prometheus host: x.x.x.x/32)
lan_health_open = False  # True: /health answers without the key (an uptime monitor); every other path still needs it
lan_tls = "local_ca"  # local_ca: a CA made on the host signs the certificate; own: lan_tls_cert_file + lan_tls_key_file
lan_tls_cert_file = None  # lan_tls = "own": your PEM certificate (chain), a path on the control machine
lan_tls_key_file = None  # lan_tls = "own": its PEM private key on the control machine (kept secret; chmod 600)
lan_tls_names = []  # extra DNS names or IPs in the local CA's certificate (the host's name and addresses always are)
lan_max_body_mb = 64  # largest request body: a 262K-token prompt as escaped JSON is a few MB, images more
lan_read_timeout_s = 1800  # longest silence from the server: a non-streamed answer to a 100K prompt comes at the end
front_of = []  # other boxes of the inventory this box also answers for at front_port (one URL; same model on all)
front_port = 8444  # front_of: the one URL's HTTPS port on this box
api_keys = []  # clients' own keys, one per name, each made on the box (sudo cat /etc/vllm-rig/keys/NAME)
chat_page = False  # True: Open WebUI, a chat page for the household, on chat_page_port (docs/chat-page.md)
chat_page_port = 8445  # the chat page's HTTPS port (its own: Open WebUI cannot live under a path)
chat_page_backend_port = 3080  # Open WebUI's own port, on loopback only (nginx serves chat_page_port)
chat_page_backups_keep = 7  # daily copies of the chat page's database kept on the box
chat_page_torch_index_url = None  # the chat page's torch index; None: torch_index_url's CPU lane (/cpu/ for /cu128/)
chat_page_index_url = None  # index for Open WebUI and its hash-locked dependencies; None: pip_index_url

# ---- verify and bench: the GPU verdict after a change, the benchmark on demand (tasks/bench.py)
verify_gate = "fail"  # a failed verdict gate stops the host (fail) or only warns (warn)
verify_bandwidth = True  # measure P2P copy and NCCL all-reduce (needs both GPUs free for a minute)
verify_min_p2p_gbps = 35.0  # least P2P copy GB/s each way (2 NVLink2 links: ~40 measured, 50 ceiling)
verify_min_allreduce_gbps = 30.0  # least all-reduce bus GB/s (2 ranks: ceiling ~50; calibrate on your box)
bench_sizes = "20000:3:256,60000:2:128"  # the reference setup's runs: TOKENS:RUNS:MAX_TOKENS
bench_label = "run"  # label stored with bench results (e.g. FP8-KV, FP16-KV for an A/B)

# ---- operating: status, triage, logs and remove (on demand: tasks/status.py, triage.py, logs.py, remove.py)
status_format = "table"  # how the status is printed: table, or json (one line per host on stdout)
triage_journal_lines = 400  # journal lines of the service and the build in a triage bundle
logs_source = "service"  # whose log tasks/logs.py shows (bin/rig logs SOURCE)
logs_lines = 100  # lines of the log tasks/logs.py shows first (bin/rig logs -n)
logs_follow = False  # tasks/logs.py keeps printing new lines until Ctrl-C (bin/rig logs -f)
keys_action = "list"  # what tasks/keys.py does: list the client keys, add or revoke one (bin/rig keys ACTION)
keys_name = None  # the key tasks/keys.py adds or revokes (bin/rig keys add NAME)
remove_model = False  # tasks/remove.py also deletes the model directories (bin/rig remove --with-model)
remove_driver = False  # tasks/remove.py also removes the NVIDIA driver and CUDA (bin/rig remove --with-driver)
remove_chat_data = False  # tasks/remove.py also deletes the chat page's data (bin/rig remove --with-chat-data)
