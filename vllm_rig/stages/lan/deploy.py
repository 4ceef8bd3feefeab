"""LAN: how the LAN reaches the server.

lan_serving: proxy (the default): the server binds loopback (service stage) and nginx from the distribution
serves the LAN port: the API key on every path (vLLM's own --api-key guards only /v1, /v2, /inference and
/cohere: vllm_rig/known/server_routes.py), /metrics only from loopback and lan_metrics_allow, clients only
from lan_allow, TLS with a CA made on the host or the owner's certificate, limits sized for 100K-token prompts
and long streams. lan_serving: direct: no proxy site, and one warning line that says what the server exposes
by itself.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from vllm_rig import paths
from vllm_rig.core.files import config_files, rendered, text
from vllm_rig.core.host_package import host_programs
from vllm_rig.core.packages import distro_packages, lists_fresh
from vllm_rig.core.run import host_failed
from vllm_rig.core.secrets import Secret, secret_file
from vllm_rig.known import server_routes
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.chat_page import layout as chat
from vllm_rig.stages.lan import certificate
from vllm_rig.stages.lan.facts import lan_host
from vllm_rig.stages.lan.operations import (
    client_keys_made,
    default_site_off,
    key_map,
    local_ca,
    nginx_loaded,
    site_absent,
)

TEMPLATE = "lan/nginx-site.conf.j2"
LOADED_STAMP = f"{paths.STATE_DIR}/lan-proxy-loaded"
# What nginx loads of the stage's: a change to any of them is a reload (bin/rig keys changes the map alone).
LOADED_FILES = (paths.NGINX_SITE, paths.LAN_KEY_MAP, paths.LAN_CERT, paths.LAN_KEY)
LOOPBACK = ("127.0.0.0/8", "::1/128")
# What vLLM serves without the key: its AuthenticationMiddleware checks only /v1, /v2, /inference and /cohere.
OPEN_PATHS = ", ".join(server_routes.OPEN_PATHS)
GUARDED = ", ".join(server_routes.GUARDED_PREFIXES)


@deploy("LAN")
def serve_lan(s: Settings) -> None:
    if host_failed():
        return
    if s.lan_serving == "direct":
        _direct(s)
        return
    layout = Layout.of(s)
    found = lan_host(paths.NGINX_DEFAULT_SITE)  # fixed facts: IPv6, whose site
    default_site_off(name="The distribution's port-80 default site stays off", path=paths.NGINX_DEFAULT_SITE)
    lists_fresh(name="Package lists know nginx and are less than a day old", packages=["nginx"])
    distro_packages(name="nginx and openssl from the distribution", packages=["nginx", "openssl"])
    host_programs(layout.host_package)  # lan_tls and lan_keys run from it
    if s.lan_tls == "local_ca":
        local_ca(
            name="Local CA and a certificate naming this host and its addresses",
            package=layout.host_package,
            directory=paths.LAN_DIR,
            names=tuple(s.lan_tls_names),
        )
    else:
        config_files(
            name="Your certificate (lan_tls_cert_file)",
            files=(text(paths.LAN_CERT, certificate.read(s.lan_tls_cert_file or "").decode()),),
        )
        secret_file(
            name="Your certificate's key (lan_tls_key_file, root only)",
            path=paths.LAN_KEY,
            content=Secret(certificate.read(s.lan_tls_key_file or "").decode()),
        )
    client_keys(s, layout.host_package)
    key_map(
        name="The proxy's key check, from the service's API key and the client keys",
        package=layout.host_package,
        keys_dir=paths.KEYS_DIR,
        env_file=layout.env_file,
        map_file=paths.LAN_KEY_MAP,
    )
    site = rendered(paths.NGINX_SITE, TEMPLATE, **site_context(s, ipv6=found["ipv6"]))
    config_files(name=f"nginx site: the LAN on port {s.lan_port}", files=(site,))
    systemd.service(name="nginx enabled and started", service="nginx.service", running=True, enabled=True)
    nginx_loaded(
        name="nginx checked and reloaded when its files changed",
        paths=LOADED_FILES,
        stamp=LOADED_STAMP,
        port=s.lan_port,
    )
    if s.lan_tls == "local_ca":
        dest = f"lan-ca/{host.name}-ca.crt"
        files.get(
            name=f"The local CA's certificate for clients, to {dest}",
            src=paths.LAN_CA_CERT,
            dest=dest,
            create_local_dir=True,
        )


def client_names(s: Settings) -> tuple[str, ...]:
    """api_keys, and the chat page's own key when the box has the page (made here, before the map is)."""
    return tuple(dict.fromkeys([*s.api_keys, *([chat.KEY_NAME] if s.chat_page else [])]))


def client_keys(s: Settings, package: str) -> None:
    """api_keys made on the box; a name revoked there is said on every run, not made again (docs/lan.md). The
    chat page's revoked key is said by its stage, in its own words."""
    client_keys_made(
        name="A key on the box for each name of api_keys and the chat page (root only; never printed)",
        package=package,
        keys_dir=paths.KEYS_DIR,
        names=client_names(s),
        said_if_revoked=tuple(n for n in s.api_keys if not (s.chat_page and n == chat.KEY_NAME)),
    )


def site_context(s: Settings, ipv6: bool) -> dict:
    """Template variables for templates/nginx-site.conf.j2."""
    upstream_host = f"[{s.server_host}]" if ":" in s.server_host else s.server_host
    return {
        "port": s.lan_port,
        "ipv6": ipv6,
        "upstream": f"{upstream_host}:{s.vllm_port}",
        "key_map": paths.LAN_KEY_MAP,
        "access_log": paths.LAN_ACCESS_LOG,
        "client_networks": _networks(s.lan_allow, ipv6),
        "metrics_networks": _networks(s.lan_metrics_allow, ipv6),
        "health_open": s.lan_health_open,
        "cert": paths.LAN_CERT,
        "key": paths.LAN_KEY,
        "max_body_mb": s.lan_max_body_mb,
        "read_timeout_s": s.lan_read_timeout_s,
    }


def _networks(extra: list[str], ipv6: bool) -> list[str]:
    nets = [*LOOPBACK, *extra]
    return list(dict.fromkeys(n for n in nets if ipv6 or ":" not in n))


def _direct(s: Settings) -> None:
    site_absent(name="No vllm-rig site in nginx (lan_serving: direct)", path=paths.NGINX_SITE, stamp=LOADED_STAMP)
    if s.server_host not in ("127.0.0.1", "::1"):
        logger.warning(
            f"[{host.name}] lan_serving is direct: the server itself listens on {s.server_host}:{s.vllm_port}, "
            f"plain HTTP; its API key guards only {GUARDED}, so {OPEN_PATHS} answer anyone who reaches the port "
            f"(/invocations and /generative_scoring run the model; vLLM {server_routes.RELEASE})"
        )
