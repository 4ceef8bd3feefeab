"""Chat page (chat_page: true): Open WebUI from PyPI at an exact version, every file checked by the lock's
sha256, in its own venv beside a CPU torch, as its own unprivileged hardened unit with the GPUs hidden,
served by the box's nginx on chat_page_port with the LAN's TLS and client networks, talking to the server
through nginx on loopback with a key of its own (chat-page, made by the LAN stage; revoked, it is not made
again); its database copied daily by a timer. chat_page: false takes the site
and the units away and leaves the venv and the data (bin/rig remove removes them).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import systemd

from vllm_rig import paths
from vllm_rig.core.files import config_files, rendered, shipped
from vllm_rig.core.packages import distro_packages
from vllm_rig.core.run import host_failed
from vllm_rig.core.users import system_user
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings, chat_page_torch_index
from vllm_rig.stages.chat_page import layout as chat
from vllm_rig.stages.chat_page.layout import ChatDirs
from vllm_rig.stages.chat_page.operations import chat_env, chat_started, chat_venv
from vllm_rig.stages.lan.facts import ClientKeys, lan_host
from vllm_rig.stages.lan.operations import nginx_loaded, site_absent
from vllm_rig.stages.service import unit

# What every unit of the rig closes (service/unit.py CLOSED), and more: the page needs no device at all
# (PrivateDevices hides the GPUs, with CUDA_VISIBLE_DEVICES empty besides) and writes only its home.
HARDENING = (
    "NoNewPrivileges=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "ProtectSystem=strict",
    f"ReadWritePaths={chat.HOME}",
    "ProtectHome=yes",
    *unit.CLOSED,
)


def environment(s: Settings) -> list[tuple[str, str]]:
    """Open WebUI's settings (read in its 0.12.4 source: open_webui/env.py, config.py)."""
    return [
        ("DATA_DIR", chat.DATA_DIR),  # default: inside the installed package, lost with the venv
        # It copies its icons and styles here at every start; the default is inside the package, read-only.
        ("STATIC_DIR", chat.STATIC_DIR),
        # Default True: the environment only seeds its database on first start, so a rotated key never
        # reached it. False: these values win on every start.
        ("ENABLE_PERSISTENT_CONFIG", "False"),
        # The server through nginx on loopback, as any client: its own key checked, named in the access log, and
        # swapped for the server's. The local CA's certificate names localhost (host/lan_tls.py wanted()).
        ("OPENAI_API_BASE_URLS", f"https://localhost:{s.lan_port}/v1"),
        # Trust only the box's CA for it. Open WebUI 0.12.4 passes ssl=AIOHTTP_CLIENT_SESSION_SSL to its requests
        # to an OpenAI connection (open_webui/routers/openai.py:111 the model list, :1589 generate_chat_completion);
        # a file path there becomes ssl.create_default_context(cafile=path), that CA alone (open_webui/env.py:575,
        # :602-605, :637);
        # an unreadable path falls back to the default store, which refuses this CA: no answer, never trust.
        # (aiohttp's own default context would honour SSL_CERT_FILE, but that would also swap the store for
        # every other HTTPS call it makes.)
        ("AIOHTTP_CLIENT_SESSION_SSL", paths.LAN_CA_CERT),
        # The box's model chosen on a new chat (else the page asks first). Every value here is a constant, a
        # port or served_model_name, whose rule allows no space, quote, % or $: none needs systemd's quoting.
        ("DEFAULT_MODELS", s.served_model_name),
        ("ENABLE_OLLAMA_API", "False"),
        # The default embedding setting loads sentence-transformers at start and fetches a model from the hub.
        ("RAG_EMBEDDING_ENGINE", "openai"),
        ("BYPASS_EMBEDDING_AND_RETRIEVAL", "True"),
        ("OFFLINE_MODE", "True"),  # HF_HUB_OFFLINE=1, no version check
        ("CUDA_VISIBLE_DEVICES", ""),
        ("USE_CUDA_DOCKER", "false"),
        ("HOME", chat.HOME),
        ("DO_NOT_TRACK", "true"),
        ("ANONYMIZED_TELEMETRY", "false"),
        ("SCARF_NO_ANALYTICS", "true"),
    ]


def unit_context(s: Settings, dirs: ChatDirs) -> dict:
    return {
        "version": chat.VERSION,
        "server_unit": f"{s.service_name}.service",
        "user": chat.USER,
        "home": chat.HOME,
        "environment": environment(s),
        "env_file": chat.ENV_FILE,
        "venv": dirs.venv,
        "port": s.chat_page_backend_port,
        "hardening": HARDENING,
    }


def site_context(s: Settings, ipv6: bool) -> dict:
    return {
        "port": s.chat_page_port,
        "ipv6": ipv6,
        "upstream_port": s.chat_page_backend_port,
        "cert": paths.LAN_CERT,
        "key": paths.LAN_KEY,
        "max_body_mb": s.lan_max_body_mb,
        "read_timeout_s": s.lan_read_timeout_s,
    }


@deploy("Chat page")
def serve_chat_page(s: Settings) -> None:
    if host_failed():
        return
    if not s.chat_page:
        _off()
        return
    dirs = ChatDirs.of(s)
    python = f"python{s.python_version}"
    distro_packages(name=f"{python} and its venv module", packages=[python, f"{python}-venv"])
    system_user(
        name=f"System user {chat.USER} (home {chat.HOME} holds the page's data)",
        user=chat.USER,
        home=chat.HOME,
        shell="/usr/sbin/nologin",
        groups=(),
    )
    config_files(
        name="Open WebUI's and its CPU torch's locks (every file by sha256) and the database copier",
        files=(
            shipped(dirs.lock, chat.LOCK),
            shipped(dirs.torch_lock, chat.TORCH_LOCK),
            shipped(dirs.backup_script, "chat_page/vllm-rig-chat-backup", mode="755"),
        ),
    )
    chat_venv(
        name=f"Open WebUI {chat.VERSION} in its own venv, its CPU torch first",
        dirs=dirs,
        python=f"/usr/bin/{python}",
        torch_index=chat_page_torch_index(s) or "",
        index_url=s.chat_page_index_url or s.pip_index_url,
    )
    said_if_revoked(s)
    _units(s, dirs)
    page_with_its_key(s)
    found = lan_host(paths.NGINX_DEFAULT_SITE)
    site = rendered(chat.NGINX_SITE, "chat_page/nginx-site.conf.j2", **site_context(s, ipv6=found["ipv6"]))
    config_files(name=f"nginx site: the chat page on port {s.chat_page_port}", files=(site,))
    nginx_loaded(
        name="nginx checked and reloaded when the chat site changed",
        paths=(chat.NGINX_SITE,),
        stamp=chat.LOADED_STAMP,
        port=s.chat_page_port,
    )


def said_if_revoked(s: Settings) -> None:
    """A chat-page key revoked on the box is not made again (as any api_keys name): one line on every run."""
    found = host.get_fact(ClientKeys, package=Layout.of(s).host_package, keys_dir=paths.KEYS_DIR)
    if chat.KEY_NAME in found["revoked"] and chat.KEY_NAME not in found["keys"]:
        logger.warning(
            f"[{host.name}] chat page: its key {chat.KEY_NAME} was revoked on the box: the page cannot reach the "
            f"server until bin/rig keys add {chat.KEY_NAME}"
        )


def page_with_its_key(s: Settings) -> None:
    """The page's env file holds its key as the box has it, and the page runs with it (the deploy, and bin/rig
    keys add or revoke chat-page, so a new key reaches the page without a deploy)."""
    chat_env(
        name="The page's env file: its own key (chat-page), its session secret",
        key_file=chat.KEY_FILE,
        env_file=chat.ENV_FILE,
    )
    chat_started(
        name="The chat page started with what is on disk, answering on loopback",
        unit=chat.UNIT,
        files=(f"/etc/systemd/system/{chat.UNIT}", chat.ENV_FILE, f"{ChatDirs.of(s).venv}/.vllm-rig-complete"),
        stamp=chat.STARTED_STAMP,
        port=s.chat_page_backend_port,
    )


def _units(s: Settings, dirs: ChatDirs) -> None:
    backup: dict[str, Any] = {
        "user": chat.USER,
        "keep": s.chat_page_backups_keep,
        "script": dirs.backup_script,
        "data_dir": chat.DATA_DIR,
        "backup_dir": chat.BACKUP_DIR,
        "hardening": HARDENING,
    }
    units = config_files(
        name="The chat page's unit and its daily database copy",
        files=(
            rendered(f"/etc/systemd/system/{chat.UNIT}", "chat_page/chat-page.service.j2", **unit_context(s, dirs)),
            rendered(f"/etc/systemd/system/{chat.BACKUP_UNIT}.service", "chat_page/backup.service.j2", **backup),
            rendered(f"/etc/systemd/system/{chat.BACKUP_UNIT}.timer", "chat_page/backup.timer.j2"),
        ),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=units.did_change)
    timer = f"{chat.BACKUP_UNIT}.timer"
    systemd.service(name="The daily copy's timer enabled", service=timer, running=True, enabled=True)


def _off() -> None:
    """chat_page: false: nothing of the page answers; its venv and data stay (bin/rig remove removes them)."""
    site_absent(name="No chat page site in nginx (chat_page: false)", path=chat.NGINX_SITE, stamp=chat.LOADED_STAMP)
    systemd.service(name="The chat page stopped (chat_page: false)", service=chat.UNIT, running=False, enabled=False)
    systemd.service(name="Its daily copy stopped", service=f"{chat.BACKUP_UNIT}.timer", running=False, enabled=False)
