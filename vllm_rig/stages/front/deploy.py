"""Front: one URL for several boxes that serve the same model (front_of).

The front is nginx on one box of the inventory, beside that box's own proxy: clients reach it on front_port with
the box's certificate and key(s); an upstream spreads their requests over this box and the boxes front_of names,
with passive health (a box that fails is left out for a while, a request it failed goes to the next one while
nothing has been sent to the client). nginx sets one Authorization header and one TLS name per location, so each
box has a small server of its own on a unix socket that puts that box's key in and checks its certificate
against that box's CA: a box's key never reaches another box, and no box's CA can vouch for another.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.facts.server import Hostname
from pyinfra.operations import files

from vllm_rig import host_settings, paths
from vllm_rig.core.checks import require
from vllm_rig.core.files import config_files, rendered
from vllm_rig.core.run import host_failed
from vllm_rig.paths import Layout
from vllm_rig.setting_types import DNS_NAME
from vllm_rig.settings import Settings
from vllm_rig.stages.front.operations import box_files
from vllm_rig.stages.lan.facts import lan_host
from vllm_rig.stages.lan.operations import nginx_loaded, site_absent

TEMPLATE = "front/nginx-front.conf.j2"
LOADED_STAMP = f"{paths.STATE_DIR}/front-loaded"
CONNECT_TIMEOUT_S = 5  # a box that does not answer is given up on after this, and the next one tried
FAIL_TIMEOUT_S = 10  # a box that failed twice within this is left out for this long (nginx's default: 10 s)


@dataclass(frozen=True)
class Box:
    name: str
    address: str  # host:port of its proxy, as the front dials it
    tls_name: str  # a name its certificate carries, checked by the front
    env_file: str  # its API key, on the box
    ca: str  # its CA certificate, on the front
    key: str  # the nginx line with its key, on the front
    socket: str  # the front's own server for it


def box(name: str, s: Settings, address: str, tls_name: str) -> Box:
    here = f"{paths.FRONT_DIR}/{name}"
    return Box(
        name=name,
        address=f"[{address}]:{s.lan_port}" if ":" in address else f"{address}:{s.lan_port}",
        tls_name=tls_name,
        env_file=Layout.of(s).env_file,
        ca=f"{here}-ca.crt",
        key=f"{here}-key.conf",
        socket=f"/run/vllm-rig-front-{name}.sock",
    )


@deploy("Front")
def serve_front(s: Settings) -> None:
    if host_failed():
        return
    if not s.front_of:
        site_absent(name="No front in nginx (front_of is empty)", path=paths.FRONT_SITE, stamp=LOADED_STAMP)
        files.directory(name="No boxes' keys on this box (front_of is empty)", path=paths.FRONT_DIR, present=False)
        return
    boxes = [box(host.name, s, "127.0.0.1", "localhost")]  # its own proxy, on loopback
    for name in s.front_of:
        other = state.inventory.get_host(name)
        theirs = host_settings.of_box(name)
        assert theirs is not None  # checked with every host's settings before the run (stages/front/check.py)
        address = str(other.data.get("ssh_hostname") or name)  # where the deploy reaches it
        hostname = str(other.get_fact(Hostname) or "")  # lan_tls puts the host's name in its certificate
        if not DNS_NAME.match(hostname):  # it goes into the nginx site
            said = f"front: {name}'s host name {hostname!r} is not a DNS name (letters, digits, - and dots)"
            require(name="The boxes' host names", problem=functools.partial(str, said))
            return
        boxes.append(box(name, theirs, address, hostname))
    for each in boxes:
        box_files(
            name=f"{each.name}'s CA and API key for the front (root only)",
            box=each.name,
            env_file=each.env_file,
            ca_file=paths.LAN_CA_CERT,
            ca_dest=each.ca,
            key_dest=each.key,
        )
    ipv6 = lan_host(paths.NGINX_DEFAULT_SITE)["ipv6"]
    site = rendered(paths.FRONT_SITE, TEMPLATE, **site_context(s, boxes, ipv6))
    config_files(name=f"nginx site: one URL for {len(boxes)} boxes on port {s.front_port}", files=(site,))
    nginx_loaded(
        name="nginx checked and reloaded when the front's files changed",
        paths=(paths.FRONT_SITE, *(p for b in boxes for p in (b.ca, b.key))),
        stamp=LOADED_STAMP,
        port=s.front_port,
    )


def site_context(s: Settings, boxes: list[Box], ipv6: bool) -> dict:
    """Template variables for templates/front/nginx-front.conf.j2."""
    return {
        "port": s.front_port,
        "ipv6": ipv6,
        "boxes": boxes,
        "cert": paths.LAN_CERT,
        "key": paths.LAN_KEY,
        "max_body_mb": s.lan_max_body_mb,
        "read_timeout_s": s.lan_read_timeout_s,
        "connect_timeout_s": CONNECT_TIMEOUT_S,
        "fail_timeout_s": FAIL_TIMEOUT_S,
    }
