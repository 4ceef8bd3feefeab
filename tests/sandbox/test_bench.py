"""vllm_rig/host/bench.py against the stand-in vLLM server (tests/sandbox/fixtures/forge/standin_fork).

The server runs from a copy of the stand-in's source on PYTHONPATH, with what its start-up checks want put
around it: a stub nvidia-smi listing two GPUs, a stub torch and torchvision, a tiny model directory and a stub vllm._C
(building the real extension is test_forge's business, and takes a venv and a pip run). Its speeds come
from a knob file; the benchmark must read them back from the outside, like it would on the real box.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import host_scripts
from tests.sandbox.fixtures import forge
from vllm_rig.host import bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = host_scripts.program("bench")  # argv: python, the zip, the program
STANDIN = ROOT / "tests" / "sandbox" / "fixtures" / "forge" / "standin_fork"
API_KEY = "bench-key"
# Prefill at 5000 tok/s, not faster: a request costs the stand-in ~5 ms before its prefill clock starts
# (tokenizing, hashing blocks), which at 20000 tok/s and a 0.2-0.4 s TTFT is 2-3.5% of it.
FAST = {"prefill_tps": 5000.0, "decode_tps": 400.0, "mtp_acceptance": 0.75}
SEED = {"prefill_tps": 1300.0, "decode_tps": 85.0, "mtp_acceptance": 0.75}  # the reference box's figures
SERVER_ARGS = [
    "--served-model-name",
    "qwen-local",
    "--max-model-len",
    "100000",
    "--enable-prefix-caching",
    "--max-num-seqs",
    "1",
    "--reasoning-parser",
    "qwen3",
    "--speculative-config",
    '{"method":"mtp","num_speculative_tokens":3}',
    "--disable-uvicorn-access-log",
]


# --- the stand-in server -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _runtime(root: Path) -> dict[str, str]:
    """The stand-in's source and what its start-up checks look for; returns the server's environment."""
    src = root / "src"
    shutil.copytree(STANDIN / "vllm", src / "vllm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (src / "vllm" / "_C.py").write_text('"""Stub of the compiled extension (test_forge builds the real one)."""\n')
    (root / "site" / "torch").mkdir(parents=True)
    (root / "site" / "torch" / "__init__.py").write_text('__version__ = "2.11.0+cu128"\n')
    (root / "site" / "torchvision").mkdir()  # the Qwen3.5/3.6 processor needs it (standin/checks.py)
    (root / "site" / "torchvision" / "__init__.py").write_text('__version__ = "0.26.0+cu128"\n')
    gpus = "".join(
        f"echo 'GPU {i}: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-{i}0000000-0000-0000-0000-000000000000)'\n"
        for i in range(2)
    )
    _write_exe(root / "bin" / "nvidia-smi", "#!/bin/sh\n" + gpus)
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"max_position_embeddings": 262144}}
        )
    )
    header = json.dumps({"lm_head.weight": {"dtype": "F16", "shape": [8, 4], "data_offsets": [0, 64]}}).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(64))
    return {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "HOME": str(root),
        "PYTHONPATH": f"{src}:{root / 'site'}",
        "VLLM_STANDIN_KNOBS": str(root / "knobs.json"),
        "VLLM_API_KEY": API_KEY,
    }


@dataclass
class StandIn:
    url: str
    knobs: Path
    log: Path

    def set_rates(self, rates: dict[str, float]) -> None:
        self.knobs.write_text(json.dumps({**rates, "startup_seconds": 0.1, "log_stats_interval": 60}))


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"stand-in exited {proc.returncode}:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    root = tmp_path_factory.mktemp("standin")
    env = _runtime(root)
    port = _free_port()
    server = StandIn(f"http://127.0.0.1:{port}", root / "knobs.json", root / "server.log")
    server.set_rates(FAST)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--model", str(root / "model"), *SERVER_ARGS]
    with server.log.open("w") as log:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(proc, server.url, server.log)
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def run_bench(
    standin: StandIn, tmp_path: Path, *args: str, key: str | None = API_KEY
) -> tuple[subprocess.CompletedProcess, dict]:
    """bench.py as a user runs it: its own process, the key from the environment."""
    out = tmp_path / "bench.json"
    env = {"PATH": os.environ["PATH"], **({"VLLM_API_KEY": key} if key else {})}
    cmd = [*BENCH, "--base-url", standin.url, "--json-out", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


# --- against the stand-in --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rates", "sizes"),
    [(FAST, "4000:3:201,8000:2:201"), (SEED, "2000:2:44")],
    ids=["fast-knobs", "seed-knobs"],
)
def test_reads_back_the_knob_rates(standin: StandIn, tmp_path: Path, rates: dict[str, float], sizes: str) -> None:
    standin.set_rates(rates)
    proc, result = run_bench(standin, tmp_path, "--sizes", sizes, "--warmup-sized", "1", "--label", "FP8 KV")
    assert proc.returncode == 0, proc.stderr
    runs = result["runs"]
    expected = [(int(s.split(":")[0]), int(s.split(":")[1]), int(s.split(":")[2])) for s in sizes.split(",")]
    assert [(r["target_tokens"], r["max_tokens"]) for r in runs] == [(t, m) for t, n, m in expected for _ in range(n)]
    for r in runs:
        assert r["prompt_tokens"] == pytest.approx(r["target_tokens"], rel=0.02), r  # calibrated length
        assert r["completion_tokens"] == r["max_tokens"]
        assert forge.rate_reads_back(r["prefill_tps"], rates["prefill_tps"]), r
        assert forge.decode_reads_back(r["decode_tps"], rates["decode_tps"], r["completion_tokens"]), r
        assert r["acceptance"] == pytest.approx(rates["mtp_acceptance"], abs=0.03), r
    assert result["model"] == "qwen-local" and result["label"] == "FP8 KV"
    assert len(result["warmups"]) == len(expected)
    assert result["summary"][runs[0]["size"]]["n"] == expected[0][1]


def test_prints_the_seed_table(standin: StandIn, tmp_path: Path) -> None:
    standin.set_rates(FAST)
    proc, result = run_bench(standin, tmp_path, "--sizes", "4000:2:33", "--warmup-short", "1", "--warmup-sized", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [
        "Run",
        "Context",
        "TTFT",
        "(s)",
        "Prefill",
        "(tok/s)",
        "Decode",
        "(tok/s)",
        "MTP",
        "Acceptance",
    ]
    assert [line.split()[0] for line in lines[1:3]] == ["run1", "run2"]
    assert f"{result['runs'][0]['prompt_tokens']:,} tok" in lines[1] and lines[1].endswith("%")
    assert lines[4].startswith("4K mean: TTFT ")
    assert "warm-up: short request 1" in proc.stderr and "calibration:" in proc.stderr
    assert result["warmups"] == []


def test_prompts_never_hit_the_prefix_cache(standin: StandIn) -> None:
    """Two prompts of the same length from the generator share no cached block (UUID first), by the engine's own
    count, not by how fast they went: the unit runs without --enable-prompt-tokens-details, so usage carries no
    cached_tokens, and bench reads vllm:prefix_cache_hits around each run (0.27.1 v1/metrics/loggers.py:595-598)."""
    standin.set_rates(FAST)
    server = bench.Server(standin.url, API_KEY, 30.0)
    size = bench.Size(300, 1, 2)
    first = bench.measure(server, "qwen-local", bench.make_prompt(300, bench.random.Random(1)), size, 1)
    prompt = bench.make_prompt(300, bench.random.Random(1))  # same words, new UUID
    again = bench.measure(server, "qwen-local", prompt, size, 2)
    assert first.cached_tokens == 0 and again.cached_tokens == 0, (first, again)
    repeat = bench.measure(server, "qwen-local", prompt, size, 3)  # the very same prompt: the cache serves it
    assert repeat.cached_tokens is not None and repeat.cached_tokens > repeat.prompt_tokens // 2, repeat
    usage = bench.stream_chat(server, bench.chat_body("qwen-local", prompt, 2, True, stream=True)).usage
    assert not (usage.get("prompt_tokens_details") or {}).get("cached_tokens")  # what bench used to read: null


def test_api_key_from_a_file_and_a_missing_key(standin: StandIn, tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(API_KEY + "\n")
    proc, _ = run_bench(
        standin, tmp_path, "--sizes", "500:1:5", "--warmup-short", "0", "--api-key-file", str(key_file), key=None
    )
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "no-key").mkdir()
    proc, result = run_bench(standin, tmp_path / "no-key", "--sizes", "500:1:5", key=None)
    assert result == {}  # nothing written
    assert proc.returncode == 2 and "HTTP 401" in proc.stderr and "VLLM_API_KEY or --api-key-file" in proc.stderr


def test_unreachable_server_is_one_line(tmp_path: Path) -> None:
    cmd = [*BENCH, "--base-url", f"http://127.0.0.1:{_free_port()}", "--sizes", "500:1:5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith("bench.py: cannot reach http://127.0.0.1:")
    assert "Traceback" not in proc.stderr
