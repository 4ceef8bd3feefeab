"""Where the sandbox keeps its state. One place, so every fixture agrees."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Per-checkout state: machines, served content, pid files, logs, keys, fault knobs.
ROOT = Path(os.environ.get("VLLM_RIG_SANDBOX_ROOT", REPO / ".sandbox"))
WWW = ROOT / "www"
STATE = ROOT / "state"
KNOBS = STATE / "knobs"
KEYS = ROOT / "keys"

# Slow, reusable downloads (the debootstrapped rootfs, wheels from PyPI) survive a fresh clone, so a
# CI run on the same machine does not pay for them again.
CACHE = Path(os.environ.get("VLLM_RIG_SANDBOX_CACHE", Path.home() / ".cache" / "vllm-rig-sandbox"))

HF_MIRROR_PORT = 18080
FILESERVER_PORT = 18081


def fileserver_url(path: str = "") -> str:
    """URL of a path under WWW as the static file server serves it."""
    return f"http://127.0.0.1:{FILESERVER_PORT}/{path.lstrip('/')}"
