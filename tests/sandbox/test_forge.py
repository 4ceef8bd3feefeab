"""The forge fixture: git remotes over git's smart HTTP, the stand-in fork's real build, and its OpenAI server.

Everything runs on loopback: the sandbox's file server (nginx and git http-backend, fixtures/fileserver.py) serves
paths.WWW; the stand-in server binds 127.0.0.1 on a free port. pip fetches setuptools and wheel from its default
index once per run.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandbox import services
from tests.sandbox.fixtures import forge
from tests.sandbox.test_standin_parser import seed_argv as flat
from tests.sandbox.test_standin_parser import without_the_two_bad_things
from tests.unit.seed_units import SEED1_ARGS, SEED2_ARGS

# The users' commands (seeds 000 and 002), flag for flag; host, port and model path are swapped per test.
# Seed 000 without the two things the real v0.1.x server refuses (see test_standin_parser.py): --device-ids
# (GPUs come from CUDA_VISIBLE_DEVICES) and default_thinking_token_budget inside --reasoning-config (the
# budget is VLLM_DEFAULT_THINKING_TOKEN_BUDGET in the environment: test_the_servers_budget_applies_only_...).
SEED_000 = flat(without_the_two_bad_things(SEED1_ARGS))
SEED_002 = flat(SEED2_ARGS)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
API_KEY = "sandbox-key"
RATES = {"prefill_tps": 2000.0, "decode_tps": 100.0, "mtp_acceptance": 0.75}
KNOBS = {**RATES, "startup_seconds": 0.2, "log_stats_interval": 0.5}
FIXED_HEADER = "struct SharedStorageQKVO { uint8_t[1]> k_sf_smem; };\nconstexpr uint32_t smem_sample_lo_mma = 128;\n"
BROKEN_HEADER = "struct SharedStorageQKVO { uint8_t[1]> k_sf_smem; };\n"
GPU_LINE = "GPU {i}: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-{i}0000000-0000-0000-0000-000000000000)"


# --- helpers ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, check: bool = True):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def clone(port: int, repo: str, dest: Path, sha: str) -> Path:
    run(["git", "clone", "-q", forge.remote_url(repo, port), str(dest)])
    run(["git", "-C", str(dest), "checkout", "-q", sha])
    return dest


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def nvidia_smi(bin_dir: Path, gpus: int, fail: str | None = None) -> Path:
    """A minimal `nvidia-smi -L`; the rig's real stand-in lives in the NVIDIA apt fixture."""
    body = f"echo '{fail}'\nexit 18\n" if fail else "".join(f"echo '{GPU_LINE.format(i=i)}'\n" for i in range(gpus))
    return write_exe(bin_dir / "nvidia-smi", "#!/bin/sh\n" + body)


def safetensors(path: Path, truncate: int = 0) -> None:
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "lm_head.weight": {"dtype": "F16", "shape": [8, 4], "data_offsets": [0, 64]},
        }
    ).encode()
    data = struct.pack("<Q", len(header)) + header + bytes(64)
    path.write_bytes(data[: len(data) - truncate])


def tiny_model(root: Path, max_positions: int = 262144) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {"max_position_embeddings": max_positions, "mtp_num_hidden_layers": 1},
    }
    (root / "config.json").write_text(json.dumps(config))
    safetensors(root / "model.safetensors")
    return root


def fake_flashinfer(root: Path, header: str) -> Path:
    package = root / "flashinfer"
    (package / "data/include/flashinfer/attention").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('__version__ = "0.6.14"\n')
    (package / "data/include/flashinfer/attention/prefill.cuh").write_text(header)
    return root


def fake_torch(root: Path, vision: bool = True) -> Path:
    (root / "torch").mkdir(parents=True, exist_ok=True)
    (root / "torch" / "__init__.py").write_text('__version__ = "2.11.0+cu128"\n')
    if vision:  # the Qwen3.5/3.6 processor needs it (see standin/checks.py VIDEO_PROCESSORS)
        (root / "torchvision").mkdir(exist_ok=True)
        (root / "torchvision" / "__init__.py").write_text('__version__ = "0.26.0+cu128"\n')
    return root


def count_tokens(text: str) -> int:
    """The stand-in's documented tokenizer: ceil(len / 4) tokens per whitespace-separated word."""
    return sum(-(-len(word) // 4) for word in text.split())


def seed_argv(seed: list[str], port: int, model: Path) -> list[str]:
    argv = list(seed)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port)), ("--model", str(model))):
        argv[argv.index(flag) + 1] = value
    return argv


# --- static file server, build and venv fixtures ---------------------------------------------------------
@pytest.fixture(scope="module")
def manifest() -> dict[str, dict[str, str]]:
    forge.build()
    return json.loads(forge.MANIFEST.read_text())


@pytest.fixture(scope="module")
def fileserver(manifest: dict) -> int:
    """The sandbox's own file server (started if it is not running; it stays up, as `up` leaves it)."""
    outcome = services.up_one("fileserver")
    assert outcome.port is not None
    return outcome.port


def make_venv(path: Path) -> Path:
    run([sys.executable, "-m", "venv", str(path)])
    python = path / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "setuptools>=77.0.3,<81", "wheel"])
    return python


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venv") / "venv")


@pytest.fixture(scope="module")
def cuda_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cuda-12.9")
    write_exe(
        root / "bin" / "nvcc",
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        "echo 'Cuda compilation tools, release 12.9, V12.9.86'\n",
    )
    return root


def build_env(cuda_home: Path, knobs: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "TORCH_CUDA", "CUDA_", "MAX_JOBS"))}
    cutlass = cuda_home / "cutlass-src"
    cutlass.mkdir(exist_ok=True)
    env.update(
        CUDA_HOME=str(cuda_home),
        TORCH_CUDA_ARCH_LIST="7.5",
        MAX_JOBS="2",
        NVCC_THREADS="1",
        VLLM_CUTLASS_SRC_DIR=str(cutlass),
        VLLM_STANDIN_KNOBS=str(knobs),
        VLLM_STANDIN_BUILD_SECONDS="0.4",
    )
    env.update(extra)
    return env


def pip_editable(python: Path, checkout: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-v", "-e", "."]
    return run(cmd, cwd=checkout, env=env, check=False)


def import_c(python: Path, cwd: Path) -> subprocess.CompletedProcess:
    code = "import vllm, vllm._C as c; print(vllm.__version__, c.arch_list(), c.__file__)"
    return run([str(python), "-c", code], cwd=cwd, env={"PATH": os.environ["PATH"]}, check=False)


@dataclass
class Installed:
    python: Path
    checkout: Path
    output: str


@pytest.fixture(scope="module")
def installed(venv: Path, fileserver: int, manifest: dict, cuda_home: Path, tmp_path_factory) -> Installed:
    """The fork at its pinned tag, built editable in the shared venv (the runtime the server tests use)."""
    tmp = tmp_path_factory.mktemp("fork")
    checkout = clone(fileserver, forge.FORK, tmp / "vLLM-2080Ti-Definitive", manifest[forge.FORK][forge.FORK_TAG])
    proc = pip_editable(venv, checkout, build_env(cuda_home, tmp / "knobs.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Installed(venv, checkout, proc.stdout + proc.stderr)


# --- git remotes -----------------------------------------------------------------------------------------
def test_manifest_names_distinct_pinned_commits(manifest: dict) -> None:
    fork = manifest[forge.FORK]
    assert set(fork) == {"v0.1.17", "main", "broken", forge.NEXT_TAG, forge.PREVIEW_TAG}
    assert len(set(fork.values())) == 5
    assert all(re.fullmatch(r"[0-9a-f]{40}", sha) for repo in manifest.values() for sha in repo.values())
    assert manifest[forge.FLASHQLA]["main"] == manifest[forge.FLASHQLA]["sm70-sm75-gdn-forward"]


def test_build_is_deterministic_and_idempotent(manifest: dict, tmp_path: Path) -> None:
    assert forge.publish(tmp_path) == manifest  # another build, later, elsewhere: the same SHAs
    refs = forge.GIT_DIR / f"{forge.FORK}.git" / "packed-refs"
    before = refs.stat().st_mtime_ns
    forge.build()
    assert refs.stat().st_mtime_ns == before


def test_the_remote_lists_its_tags_and_refuses_a_push(fileserver: int, manifest: dict, tmp_path: Path) -> None:
    url = forge.remote_url(forge.FORK, fileserver)
    tags = run(["git", "ls-remote", "--tags", url]).stdout  # what tasks/fork_releases.py asks
    for tag in (forge.FORK_TAG, forge.NEXT_TAG, forge.PREVIEW_TAG):
        assert f"{manifest[forge.FORK][tag]}\trefs/tags/{tag}" in tags
    clone(fileserver, forge.FORK, tmp_path / "c", manifest[forge.FORK]["main"])
    push = run(["git", "-C", str(tmp_path / "c"), "push", "-q", url, "HEAD:refs/heads/pushed"], check=False)
    assert push.returncode != 0  # http-backend takes no anonymous push: the remotes are the fixture's alone
    assert "refs/heads/pushed" not in run(["git", "ls-remote", url]).stdout


def test_clone_over_http_and_move_between_pins(fileserver: int, manifest: dict, tmp_path: Path) -> None:
    fork = manifest[forge.FORK]
    checkout = clone(fileserver, forge.FORK, tmp_path / "fork", fork["v0.1.17"])
    assert (checkout / "VERSION").read_text().strip() == "0.1.17"
    assert run(["git", "-C", str(checkout), "rev-parse", "v0.1.17^{commit}"]).stdout.strip() == fork["v0.1.17"]
    run(["git", "-C", str(checkout), "checkout", "-q", fork["main"]])
    assert (checkout / "VERSION").read_text().strip() == "0.1.18.dev0"
    branches = run(["git", "-C", str(checkout), "branch", "-r"]).stdout
    assert "origin/broken" in branches and "origin/main" in branches
    for name in ("requirements/build/cuda.txt", "requirements/cuda.txt", "setup.py", "csrc/standin_ops.c"):
        assert (checkout / name).is_file(), name
    assert "torch==2.11.0" in (checkout / "requirements/cuda.txt").read_text()
    qla = clone(fileserver, forge.FLASHQLA, tmp_path / "qla", manifest[forge.FLASHQLA]["main"])
    assert (qla / "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py").is_file()


def test_a_shallow_fetch_by_commit_works_as_on_github(fileserver: int, manifest: dict, tmp_path: Path) -> None:
    """vllm_rig/core/git.py's first try, `fetch --depth=1 <url> <sha>`, gets that commit alone."""
    sha = manifest[forge.FORK]["main"]
    repo = tmp_path / "by-sha"
    run(["git", "init", "-q", "--bare", str(repo)])
    run(["git", "-C", str(repo), "fetch", "-q", "--depth=1", forge.remote_url(forge.FORK, fileserver), sha])
    assert run(["git", "-C", str(repo), "rev-parse", "FETCH_HEAD"]).stdout.strip() == sha
    assert run(["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"]).stdout.strip() == "true"
    assert run(["git", "-C", str(repo), "rev-list", "--count", sha]).stdout.strip() == "1"


# --- the build -------------------------------------------------------------------------------------------
def test_editable_build_compiles_vllm_C_and_records_env(
    installed: Installed, manifest: dict, cuda_home: Path, tmp_path: Path
) -> None:
    assert "[1/13] Building CUDA object CMakeFiles/_C.dir/csrc/cache_kernels.cu.o" in installed.output
    assert "[13/13] Linking CXX shared module _C.abi3.so" in installed.output
    proc = import_c(installed.python, tmp_path)  # a neutral directory, not the checkout
    assert proc.returncode == 0, proc.stderr
    version, arch, library = proc.stdout.split()
    assert (version, arch) == ("0.1.17", "7.5")
    assert Path(library).parent == installed.checkout / "vllm"
    record = json.loads((installed.checkout / "vllm" / "_build_env.json").read_text())
    assert record["TORCH_CUDA_ARCH_LIST"] == "7.5" and record["MAX_JOBS"] == "2" and record["NVCC_THREADS"] == "1"
    assert record["CUDA_HOME"] == str(cuda_home) and "release 12.9" in record["nvcc"]
    assert record["VLLM_CUTLASS_SRC_DIR"] == str(cuda_home / "cutlass-src")
    assert record["git_commit"] == manifest[forge.FORK]["v0.1.17"]
    assert record["kernel_steps_seconds"] >= 0.4  # the build-delay knob


@pytest.fixture(scope="module")
def second_runtime(fileserver: int, manifest: dict, cuda_home: Path, tmp_path_factory) -> tuple[Path, Path]:
    """Another venv with the fork's later commit built, for the upgrade and failed-build scenarios."""
    tmp = tmp_path_factory.mktemp("second")
    python = make_venv(tmp / "venv")
    checkout = clone(fileserver, forge.FORK, tmp / "main", manifest[forge.FORK]["main"])
    proc = pip_editable(python, checkout, build_env(cuda_home, tmp / "knobs.json", VLLM_VERSION_OVERRIDE="0.1.18rc1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python, tmp


def test_later_commit_builds_with_version_override(second_runtime: tuple[Path, Path], tmp_path: Path) -> None:
    python, _ = second_runtime
    proc = import_c(python, tmp_path)
    assert proc.returncode == 0 and proc.stdout.split()[0] == "0.1.18rc1", proc.stdout + proc.stderr


@pytest.mark.parametrize("scenario", ["broken-branch", "fail-knob", "no-nvcc"])
def test_failing_build_keeps_the_old_runtime(
    scenario: str,
    second_runtime: tuple[Path, Path],
    fileserver: int,
    manifest: dict,
    cuda_home: Path,
    tmp_path: Path,
) -> None:
    python, _ = second_runtime
    knobs = tmp_path / "knobs.json"
    ref = "broken" if scenario == "broken-branch" else "main"
    checkout = clone(fileserver, forge.FORK, tmp_path / "next", manifest[forge.FORK][ref])
    env = build_env(cuda_home, knobs)
    if scenario == "fail-knob":
        knobs.write_text(json.dumps({"build_fail": True}))
    if scenario == "no-nvcc":
        env["CUDA_HOME"] = str(tmp_path)
    proc = pip_editable(python, checkout, env)
    expected = {
        "broken-branch": "error: expected expression",
        "fail-knob": "'cicc' died due to signal 9",
        "no-nvcc": "Failed to find nvcc",
    }[scenario]
    assert proc.returncode != 0 and expected in proc.stdout + proc.stderr
    still = import_c(python, tmp_path)
    assert still.returncode == 0 and still.stdout.split()[0] == "0.1.18rc1"


# --- the server ------------------------------------------------------------------------------------------
@dataclass
class Runtime:
    python: Path
    root: Path
    model: Path
    env: dict[str, str]
    knobs: Path
    extensions: Path
    flashinfer_cache: Path


@pytest.fixture(scope="module")
def runtime(installed: Installed, fileserver: int, manifest: dict, tmp_path_factory) -> Runtime:
    """What a deploy puts around the fork: GPUs (stub nvidia-smi), torch, FlashInfer, FlashQLA, a model."""
    root = tmp_path_factory.mktemp("runtime")
    qla = clone(fileserver, forge.FLASHQLA, root / "FlashQLA-SM70-SM75", manifest[forge.FLASHQLA]["main"])
    deps = fake_flashinfer(fake_torch(root / "site"), FIXED_HEADER)
    nvidia_smi(root / "bin", gpus=2)
    knobs = root / "knobs.json"
    knobs.write_text(json.dumps(KNOBS))
    env = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "HOME": str(root),
        "PYTHONPATH": f"{qla}:{deps}",
        "TORCH_EXTENSIONS_DIR": str(root / "torch_extensions"),
        "FLASHINFER_WORKSPACE_BASE": str(root),
        "VLLM_STANDIN_KNOBS": str(knobs),
    }
    return Runtime(
        installed.python,
        root,
        tiny_model(root / "model"),
        env,
        knobs,
        root / "torch_extensions",
        root / ".cache" / "flashinfer",
    )


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text()

    def request(self, method: str, path: str, body: dict | None = None, key: str | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        return conn.getresponse()

    def json(self, method: str, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict]:
        resp = self.request(method, path, body, key)
        return resp.status, json.loads(resp.read() or b"null")


def launch(rt: Runtime, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [str(rt.python), "-m", SERVER_MODULE, *argv],
            cwd=rt.root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while "Application startup complete." not in log.read_text():
        assert proc.poll() is None, f"server exited {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def stop(server: Server) -> int:
    server.proc.send_signal(signal.SIGTERM)
    return server.proc.wait(timeout=10)


@contextmanager
def _seed_000_server(runtime: Runtime, log_name: str, env: dict[str, str]) -> Iterator[Server]:
    """Seed 000's command line served until the block ends (stopped unless it already exited)."""
    port = free_port()
    log = runtime.root / log_name
    proc = launch(runtime, seed_argv(SEED_000, port, runtime.model), env, log)
    server = Server(proc, port, log)
    try:
        wait_ready(proc, log)
        yield server
    finally:
        if proc.poll() is None:
            stop(server)


@pytest.fixture(scope="module")
def seed000(runtime: Runtime) -> Iterator[Server]:
    with _seed_000_server(runtime, "seed000.log", {**runtime.env, "VLLM_API_KEY": API_KEY}) as server:
        yield server


def test_seed_000_starts_with_the_real_log_lines(seed000: Server, runtime: Runtime) -> None:
    log = seed000.output()
    for line in (
        "Starting vLLM API server 0 on http://127.0.0.1:",
        "Using FlashQLA legacy (SM70/SM75) GDN prefill kernel (requested=flashqla_legacy, head_k_dim=",
        "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].",
        "Route: /v1/chat/completions, Methods: POST",
        "Application startup complete.",
        "(APIServer pid=",
        "vLLM API server version 0.1.17",
        "FlashInfer 0.6.14 prefill on SM75: fixed by PR 3621",
    ):
        assert line in log, line
    assert API_KEY not in log
    assert (runtime.extensions / "flash_qla_legacy_gdn" / "flash_qla_legacy_gdn.so").is_file()  # built at start
    assert list(runtime.flashinfer_cache.glob("0.6.14/75/cached_ops/*/prefill.cuh.sha256"))


def test_health_models_and_api_key(seed000: Server) -> None:
    assert seed000.request("GET", "/health").status == 200  # not behind the key, like vLLM
    status, body = seed000.json("GET", "/v1/models", key=API_KEY)
    assert status == 200 and [m["id"] for m in body["data"]] == ["qwen-local"]
    assert body["data"][0]["max_model_len"] == 100000
    chat = {"model": "qwen-local", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    assert seed000.json("POST", "/v1/chat/completions", chat) == (401, {"error": "Unauthorized"})
    assert seed000.json("POST", "/v1/chat/completions", chat, key="wrong")[0] == 401
    status, body = seed000.json("POST", "/v1/chat/completions", {**chat, "model": "other"}, key=API_KEY)
    assert status == 404 and body["error"]["message"] == "The model `other` does not exist."


def test_the_key_is_checked_as_vllm_checks_it(seed000: Server) -> None:
    """vLLM's AuthenticationMiddleware: /v1 paths only; scheme "bearer" in any case, one space, the key."""

    def status(path: str, authorization: str | None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", seed000.port, timeout=60)
        conn.request("GET", path, headers={"authorization": authorization} if authorization else {})
        return conn.getresponse().status

    assert status("/v1/models", f"bearer {API_KEY}") == status("/v1/models", f"BEARER {API_KEY}") == 200
    assert status("/v1/models", f"Basic {API_KEY}") == status("/v1/models", f"Bearer  {API_KEY}") == 401
    assert status("/metrics", None) == status("/version", None) == status("/health", None) == 200
    assert status("/metrics/", None) == 200  # the metrics app is mounted on every path under /metrics


def test_chat_splits_reasoning_and_counts_tokens(seed000: Server) -> None:
    chat = {"model": "qwen-local", "messages": [{"role": "user", "content": "What is two plus two?"}]}
    status, body = seed000.json("POST", "/v1/chat/completions", chat, key=API_KEY)
    assert status == 200, body
    message, usage = body["choices"][0]["message"], body["usage"]
    assert message["reasoning_content"].startswith('Okay, the user wrote: "What is two plus two?"')
    assert "</think>" not in message["content"] and message["content"].strip().startswith("Stand-in reply:")
    assert usage["prompt_tokens"] == count_tokens("What is two plus two?") + 4 + 3
    raw = message["reasoning_content"] + "</think>" + message["content"]
    assert usage["completion_tokens"] == count_tokens(raw) and body["choices"][0]["finish_reason"] == "stop"
    again = seed000.json("POST", "/v1/chat/completions", chat, key=API_KEY)[1]
    assert again["choices"][0]["message"] == message  # deterministic


def read_sse(resp: http.client.HTTPResponse) -> list[tuple[float, str]]:
    events = []
    while line := resp.readline():
        if line.startswith(b"data: "):
            events.append((time.monotonic(), line[6:].decode().strip()))
    return events


def stream_chat(server: Server, content: str, max_tokens: int) -> tuple[float, list[tuple[float, dict]], dict]:
    body = {
        "model": "qwen-local",
        "messages": [{"role": "user", "content": content}],
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    events = read_sse(server.request("POST", "/v1/chat/completions", body, key=API_KEY))
    assert events[-1][1] == "[DONE]"
    chunks = [(t, json.loads(data)) for t, data in events[:-1]]
    return t0, [(t, c) for t, c in chunks if c["choices"]], chunks[-1][1]["usage"]


def test_streaming_chat_chunks(seed000: Server) -> None:
    _, chunks, usage = stream_chat(seed000, "Explain NVLink briefly.", 40)
    deltas = [c["choices"][0]["delta"] for _, c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert reasoning.startswith("Okay, the user wrote") and content.strip().startswith("Stand-in reply:")
    assert chunks[-1][1]["choices"][0]["finish_reason"] == "length"
    assert usage["completion_tokens"] == 40


def metric(text: str, name: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{engine="0",model_name="qwen-local"}} (\S+)$', text, re.M)
    assert match, name
    return float(match.group(1))


def aborts(text: str) -> float:
    match = re.search(r'^vllm:request_success_total{.*finished_reason="abort"} (\S+)$', text, re.M)
    assert match
    return float(match.group(1))


def test_metrics_use_vllm_names(seed000: Server) -> None:
    text = seed000.request("GET", "/metrics").read().decode()
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_count",
    ):
        metric(text, name)
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="qwen-local",le="+Inf"}' in text
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text


def test_queueing_and_disconnect_free_the_single_slot(seed000: Server) -> None:
    """--max-num-seqs 1: a second request waits; a client that goes away gives the slot back."""
    aborted = aborts(seed000.request("GET", "/metrics").read().decode())
    body = {
        "model": "qwen-local",
        "messages": [{"role": "user", "content": "long"}],
        "stream": True,
        "max_tokens": 1000,
        "ignore_eos": True,
    }
    first = seed000.request("POST", "/v1/chat/completions", body, key=API_KEY)
    assert first.readline().startswith(b"data: ")
    short = {"model": "qwen-local", "messages": [{"role": "user", "content": "short"}], "max_tokens": 2}
    result: list[int] = []
    waiter = threading.Thread(
        target=lambda: result.append(seed000.json("POST", "/v1/chat/completions", short, key=API_KEY)[0])
    )
    waiter.start()
    time.sleep(0.3)
    text = seed000.request("GET", "/metrics").read().decode()
    assert metric(text, "vllm:num_requests_running") == 1 and metric(text, "vllm:num_requests_waiting") == 1
    first.close()  # the client goes away mid-stream
    waiter.join(timeout=5)
    assert result == [200]
    text = seed000.request("GET", "/metrics").read().decode()
    assert aborts(text) == aborted + 1 and metric(text, "vllm:num_requests_running") == 0


def test_periodic_stats_lines(seed000: Server) -> None:
    deadline = time.monotonic() + 5
    while "SpecDecoding metrics: Mean acceptance length" not in seed000.output():
        assert time.monotonic() < deadline, seed000.output()
        time.sleep(0.1)
    assert re.search(r"Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput", seed000.output())


def test_seed_002_serves_without_a_key_and_stops_on_sigterm(runtime: Runtime) -> None:
    port = free_port()
    log = runtime.root / "seed002.log"
    server = Server(launch(runtime, seed_argv(SEED_002, port, runtime.model), runtime.env, log), port, log)
    try:
        wait_ready(server.proc, log)
        status, body = server.json("GET", "/v1/models")
        assert status == 200 and body["data"][0]["id"] == "qwen38-27b" and body["data"][0]["max_model_len"] == 131072
        chat = {"model": "qwen38-27b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        status, body = server.json("POST", "/v1/chat/completions", chat)
        assert status == 200 and body["usage"]["completion_tokens"] == 8
        # The access log is on in seed 002; uvicorn writes its line just after the response is sent.
        line = '"POST /v1/chat/completions HTTP/1.1" 200 OK'
        deadline = time.monotonic() + 5
        while line not in server.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in server.output()
    finally:
        assert stop(server) == 0
    assert "Application shutdown complete." in server.output()


# --- start-up failures -----------------------------------------------------------------------------------
def run_to_exit(rt: Runtime, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = run([str(rt.python), "-m", SERVER_MODULE, *argv], cwd=rt.root, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_unknown_flag_is_rejected_like_argparse(runtime: Runtime) -> None:
    rc, out = run_to_exit(runtime, [*seed_argv(SEED_000, free_port(), runtime.model), "--bogus-flag"], runtime.env)
    assert rc == 2 and "api_server.py: error: unrecognized arguments: --bogus-flag" in out


def test_bad_json_value_is_rejected(runtime: Runtime) -> None:
    argv = seed_argv(SEED_000, free_port(), runtime.model)
    argv[argv.index("--speculative-config") + 1] = '{"method":'
    rc, out = run_to_exit(runtime, argv, runtime.env)
    assert rc == 2
    assert 'argument --speculative-config/-sc: Value {"method": cannot be converted to <function loads' in out


def _one_gpu(rt: Runtime, tmp: Path, env: dict) -> str:
    nvidia_smi(tmp / "bin", gpus=1)
    env["PATH"] = f"{tmp / 'bin'}:{env['PATH']}"
    env["CUDA_VISIBLE_DEVICES"] = "0,1"  # index 1 does not exist: CUDA shows only the devices before it
    return "Tensor parallel size (2) cannot be larger than the number of available GPUs (1)"


def _driver_mismatch(rt: Runtime, tmp: Path, env: dict) -> str:
    nvidia_smi(tmp / "bin", gpus=0, fail="Failed to initialize NVML: Driver/library version mismatch")
    env["PATH"] = f"{tmp / 'bin'}:{env['PATH']}"
    return "Driver/library version mismatch"


def _no_config(rt: Runtime, tmp: Path, env: dict) -> str:
    shutil.copytree(rt.model, tmp / "model")
    (tmp / "model" / "config.json").unlink()
    return "No supported config format found in"


def _truncated_weights(rt: Runtime, tmp: Path, env: dict) -> str:
    tiny_model(tmp / "model")
    safetensors(tmp / "model" / "model.safetensors", truncate=10)
    return "MetadataIncompleteBuffer"


def _context_too_long(rt: Runtime, tmp: Path, env: dict) -> str:
    tiny_model(tmp / "model", max_positions=32768)
    return "User-specified max_model_len (100000) is greater than the derived max_model_len"


def _flashinfer_unpatched(rt: Runtime, tmp: Path, env: dict) -> str:
    env["PYTHONPATH"] = f"{fake_flashinfer(tmp / 'fi', BROKEN_HEADER)}:{env['PYTHONPATH']}"
    return "BatchPrefillWithPagedKVCache failed with error: CUDA error: invalid argument"


def _no_flashqla(rt: Runtime, tmp: Path, env: dict) -> str:
    env["PYTHONPATH"] = env["PYTHONPATH"].split(":", 1)[1]
    return "gdn_prefill_backend='flashqla_legacy' requires FlashQLA-SM70-SM75"


def _no_torch(rt: Runtime, tmp: Path, env: dict) -> str:
    env["PYTHONPATH"] = str(fake_flashinfer(tmp / "fi", FIXED_HEADER)) + ":" + env["PYTHONPATH"].split(":")[0]
    return "No module named 'torch'"


def _no_torchvision(rt: Runtime, tmp: Path, env: dict) -> str:
    only_torch = fake_flashinfer(fake_torch(tmp / "site", vision=False), FIXED_HEADER)
    env["PYTHONPATH"] = f"{env['PYTHONPATH'].split(':')[0]}:{only_torch}"
    return "Qwen3VLVideoProcessor requires the Torchvision library but it was not found in your environment."


@pytest.mark.parametrize(
    "breakage",
    [
        _no_torchvision,
        _one_gpu,
        _driver_mismatch,
        _no_config,
        _truncated_weights,
        _context_too_long,
        _flashinfer_unpatched,
        _no_flashqla,
        _no_torch,
    ],
)
def test_start_fails_like_the_real_server(breakage, runtime: Runtime, tmp_path: Path) -> None:
    env = dict(runtime.env)
    expected = breakage(runtime, tmp_path, env)
    model = tmp_path / "model" if (tmp_path / "model").is_dir() else runtime.model
    rc, out = run_to_exit(runtime, seed_argv(SEED_000, free_port(), model), env)
    assert rc == 1 and expected in out, out


def test_without_flashinfer_it_falls_back_to_triton(runtime: Runtime) -> None:
    env = {
        **runtime.env,
        "PYTHONPATH": f"{runtime.env['PYTHONPATH'].split(':')[0]}:{fake_torch(runtime.root / 'only-torch')}",
    }
    port = free_port()
    log = runtime.root / "triton.log"
    server = Server(launch(runtime, seed_argv(SEED_002, port, runtime.model), env, log), port, log)
    try:
        wait_ready(server.proc, log)
        assert "Using TRITON_ATTN attention backend out of potential backends: ['TRITON_ATTN']." in server.output()
        assert "Using FLASHINFER" not in server.output()
    finally:
        stop(server)


def test_tensor_parallel_2_needs_two_gpus(runtime: Runtime, tmp_path: Path) -> None:
    nvidia_smi(tmp_path / "bin", gpus=1)
    env = {**runtime.env, "PATH": f"{tmp_path / 'bin'}:{runtime.env['PATH']}"}
    rc, out = run_to_exit(runtime, seed_argv(SEED_002, free_port(), runtime.model), env)
    assert rc == 1 and "Tensor parallel size (2) cannot be larger than the number of available GPUs (1)" in out


@pytest.fixture(scope="module")
def budget_server(runtime: Runtime) -> Iterator[Server]:
    """Seed 000 as the unit renders it: the budget comes from the environment (the fork's serving.py)."""
    env = {**runtime.env, "VLLM_API_KEY": API_KEY, "VLLM_DEFAULT_THINKING_TOKEN_BUDGET": " 5 "}
    with _seed_000_server(runtime, "budget.log", env) as server:
        yield server


def _reasoning_tokens(server: Server, extra: dict) -> int:
    chat = {"model": "qwen-local", "messages": [{"role": "user", "content": "Explain NVLink briefly."}], **extra}
    status, body = server.json("POST", "/v1/chat/completions", chat, key=API_KEY)
    assert status == 200, body
    return count_tokens(body["choices"][0]["message"]["reasoning_content"] or "")


def test_the_servers_budget_applies_only_to_a_request_without_its_own(budget_server: Server, seed000: Server) -> None:
    """The fork's serving.py: the stripped variable, int(); a request's thinking_token_budget is never replaced."""
    unbounded = _reasoning_tokens(seed000, {})
    assert unbounded > 12  # without a budget the stand-in thinks for natural_tokens / 3
    assert _reasoning_tokens(budget_server, {}) == 5
    assert _reasoning_tokens(budget_server, {"thinking_token_budget": 12}) == 12
    assert _reasoning_tokens(seed000, {"thinking_token_budget": 12}) == 12


def test_a_budget_the_fork_cannot_read_is_ignored_with_its_warning(runtime: Runtime) -> None:
    port = free_port()
    log = runtime.root / "budget-bad.log"
    env = {**runtime.env, "VLLM_API_KEY": API_KEY, "VLLM_DEFAULT_THINKING_TOKEN_BUDGET": "4k"}
    server = Server(launch(runtime, seed_argv(SEED_000, port, runtime.model), env, log), port, log)
    try:
        wait_ready(server.proc, log)
        assert "Ignoring invalid VLLM_DEFAULT_THINKING_TOKEN_BUDGET='4k'" in server.output()
        assert _reasoning_tokens(server, {}) > 12
    finally:
        if server.proc.poll() is None:
            stop(server)
