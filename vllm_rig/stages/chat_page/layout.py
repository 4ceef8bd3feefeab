"""Where the chat page lives on a host, and what the deploy, remove and status agree on."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from vllm_rig import paths
from vllm_rig.core.files import repo_file
from vllm_rig.settings import Settings

LOCK = "chat_page/open-webui.lock"  # files/chat_page/: Open WebUI and its dependencies, every file by sha256
TORCH_LOCK = "chat_page/torch-cpu.lock"  # the CPU torch installed first, by sha256 (its requirements: LOCK)
VERSION = "0.12.4"  # the Open WebUI release the lock pins (>= 0.12.2: GHSA-3vvh-g22g-jq6r)
USER = "open-webui"
HOME = "/var/lib/open-webui"
DATA_DIR = f"{HOME}/data"  # not Open WebUI's default (inside the installed package, lost with the venv)
BACKUP_DIR = f"{HOME}/backups"
STATIC_DIR = f"{HOME}/static"  # what it copies out of the package at start (icons, custom.css)
UNIT = "vllm-rig-chat-page.service"
BACKUP_UNIT = "vllm-rig-chat-backup"  # .service (one copy) and .timer (daily)
ENV_FILE = f"{paths.ETC_DIR}/chat-page.env"  # root-only: the page's own key and its session secret
# The page is a client like any other: its own key, made on the box by lan_keys beside api_keys' (the LAN stage),
# which nginx names in its access log and swaps for the server's.
KEY_NAME = "chat-page"
KEY_FILE = f"{paths.KEYS_DIR}/{KEY_NAME}"
NGINX_SITE = "/etc/nginx/conf.d/vllm-rig-chat.conf"
LOADED_STAMP = f"{paths.STATE_DIR}/chat-page-loaded"  # nginx loaded the chat site as it is on disk
STARTED_STAMP = f"{paths.STATE_DIR}/chat-page-started"  # the page answered with the unit, env and venv on disk


def lock_text(lock: str = LOCK) -> str:
    return repo_file("shipped", lock).read_text()


@dataclass(frozen=True)
class ChatDirs:
    root: str  # <install_root>/chat-page
    key: str  # what the venv is built from: both locks and the Python (sha256, 16 hex digits)

    @classmethod
    def of(cls, s: Settings) -> ChatDirs:
        digest = hashlib.sha256(f"{lock_text()}\0{lock_text(TORCH_LOCK)}\0{s.python_version}".encode())
        return cls(f"{s.install_root}/chat-page", digest.hexdigest()[:16])

    @property
    def lock(self) -> str:
        return f"{self.root}/open-webui.lock"

    @property
    def torch_lock(self) -> str:
        return f"{self.root}/torch-cpu.lock"

    @property
    def venv(self) -> str:
        """The link the unit runs from; it is switched to a new venv only once that one is complete."""
        return f"{self.root}/venv"

    @property
    def build(self) -> str:
        return f"{self.root}/venvs/{self.key}"

    @property
    def stamp(self) -> str:
        """Written last by the install, into the venv: it is complete for this key."""
        return f"{self.build}/.vllm-rig-complete"

    @property
    def backup_script(self) -> str:
        return f"{self.root}/vllm-rig-chat-backup"
