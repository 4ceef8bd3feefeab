"""The model stage's side of the sandbox, for e2e scenarios and benchmarks: the HF mirror stand-in's knobs and
request log, the files it serves, and the model on rig1."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.conftest import Rig
from tests.sandbox import paths
from tests.sandbox.fixtures import hf_mirror
from tests.sandbox.fixtures.hf_mirror import server as mirror_server

REPO = "nerkyor/Qwen3.6-27B-DSV4Pro-Thinking-Distill-FP8"
MODEL_DIR = "/opt/vllm-rig/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8"  # group_data/all.py's model_dir
MODELS = MODEL_DIR.rsplit("/", 1)[0]
UNIT = "vllm-rig-model-fetch.service"
STATUS = "/var/lib/vllm-rig/model-fetch.json"
BIG_SHARD = "model-00001-of-00003.safetensors"
SMALL_SHARD = "model-00002-of-00003.safetensors"
MIB = 1 << 20
STAGE = ("tasks/model_start.py", "tasks/model_finish.py")
ENDPOINT = f"http://127.0.0.1:{paths.HF_MIRROR_PORT}"
MIRROR = hf_mirror.Layout.default()


# ---- the rig's mirror: knobs and request log --------------------------------------------------------


def knobs(**values: Any) -> None:
    hf_mirror.write_knobs(MIRROR.knobs, values)


def clear_log() -> None:
    MIRROR.log.write_text("")


def requests() -> list[dict[str, Any]]:
    text = MIRROR.log.read_text() if MIRROR.log.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def gets(name: str | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in requests()
        if r["method"] == "GET" and "/resolve/" in r["path"] and (name is None or r["path"].endswith(f"/{name}"))
    ]


def fetched_names() -> list[str]:
    return [g["path"].rsplit("/", 1)[1] for g in gets()]


def fetched_contents(branch: str = "main") -> list[str]:
    """The sha256 of each file GET: every content once is every distinct blob of the cache once (two files of one
    content are one blob, fetched once)."""
    return sorted(digests(branch)[name] for name in fetched_names())


def every_content(branch: str = "main") -> list[str]:
    return sorted(set(digests(branch).values()))


def snapshot_link(branch: str = "main") -> str:
    """What model_dir points to: the commit's snapshot in huggingface_hub's cache beside it."""
    return f"hf-cache/models--{REPO.replace('/', '--')}/snapshots/{commit(branch)}"


def source(branch: str = "main") -> Path:
    return paths.WWW.joinpath("hf", *REPO.split("/"), branch)


def digests(branch: str = "main") -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(source(branch).iterdir())}


def total(branch: str = "main") -> int:
    return sum(p.stat().st_size for p in source(branch).iterdir())


def blob_bytes(branch: str = "main") -> int:
    """What a whole download serves: each distinct content once (the cache keeps one blob for two such files)."""
    return sum(
        {hashlib.sha256(p.read_bytes()).hexdigest(): p.stat().st_size for p in source(branch).iterdir()}.values()
    )


def commit(branch: str = "main") -> str:
    revision = mirror_server.Store(MIRROR.repos).revision(REPO, branch)
    assert revision is not None
    return revision.commit


# ---- the host ---------------------------------------------------------------------------------------


def sh(rig: Rig, command: str, check: bool = True) -> str:
    return rig.ssh("rig1", f"sudo sh -c {json.dumps(command)}", check=check)


def host_digests(rig: Rig, directory: str = MODEL_DIR) -> dict[str, str]:
    out = sh(rig, f"cd {directory}/ && find -L . -type f ! -name .vllm-rig-complete.json -exec sha256sum {{}} +")
    return {line.split()[1].removeprefix("./"): line.split()[0] for line in out.splitlines() if line.strip()}


def status(rig: Rig) -> dict[str, Any]:
    text = sh(rig, f"cat {STATUS} 2>/dev/null || true")
    return json.loads(text) if text.strip() else {}


def unit_active(rig: Rig) -> str:
    return sh(rig, f"systemctl is-active {UNIT} || true").strip()


def reset_model(rig: Rig) -> None:
    """No model, no download running: the next deploy fetches everything."""
    sh(rig, f"systemctl stop {UNIT} 2>/dev/null; rm -rf {MODELS} {STATUS}; true")
    knobs()
    clear_log()
