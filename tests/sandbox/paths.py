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

# A slot lets several checkouts run their own rig side by side (VLLM_RIG_SANDBOX_SLOT=1, 2, ...): every
# port moves by 100 per slot and machine names in host-wide places (cgroups, nspawn) carry the slot.
SLOT = int(os.environ.get("VLLM_RIG_SANDBOX_SLOT") or 0)
PORT_OFFSET = 100 * SLOT

HF_MIRROR_PORT = 18080 + PORT_OFFSET
FILESERVER_PORT = 18081 + PORT_OFFSET
ARTIFACT_STORE_PORT = 18082 + PORT_OFFSET  # real nginx with WebDAV PUT: the shared runtime artifact store
ARTIFACT_STORE_TLS_PORT = 18083 + PORT_OFFSET  # the same store over https (a local CA)
SSH_PORT_BASE = 2220 + PORT_OFFSET  # machine rigN: SSH_PORT_BASE + N
VLLM_PORT_BASE = 8000 + PORT_OFFSET  # machine rigN serves on VLLM_PORT_BASE + N
LAN_PORT_BASE = 28400 + PORT_OFFSET  # rigN's LAN proxy (nginx) listens on LAN_PORT_BASE + N
FRONT_PORT_BASE = 28450 + PORT_OFFSET  # rigN's front (front_of) listens on FRONT_PORT_BASE + N
MODEL_PEER_PORT_BASE = 38400 + PORT_OFFSET  # rigN serves its model to the other machines on this + N


def host_wide_name(machine: str) -> str:
    """A machine's name where every checkout on this host shares one namespace (cgroups, nspawn)."""
    return f"vllm-rig-{machine}" if SLOT == 0 else f"vllm-rig-s{SLOT}-{machine}"


def fileserver_url(path: str = "") -> str:
    """URL of a path under WWW as the static file server serves it."""
    return f"http://127.0.0.1:{FILESERVER_PORT}/{path.lstrip('/')}"
