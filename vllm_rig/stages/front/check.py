"""The settings check across the boxes a front names, before any host is touched: one line per problem.

A front sends every request to any of its boxes, and nginx cannot read the request body to route by its
`model` field (docs/lan.md: One URL for several boxes), so every box must serve the same model under the same
name; each box is reached through its own proxy, whose certificate the front checks against the box's CA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vllm_rig.setting_types import DNS_NAME, is_ip
from vllm_rig.settings import Settings


def model_of(s: Settings) -> str:
    """What a client gets by asking for the served name: the weights (repo at revision) under that name."""
    return f"{s.model_repo}@{s.model_revision} as {s.served_model_name!r}"


def problems(
    front: str,
    s: Settings,
    hosts: Iterable[str],
    settings_of: Callable[[str], Settings | str],
    address_of: Callable[[str], str],
) -> list[str]:
    """Lines for what is wrong with `front`'s front_of; `settings_of(name)` gives a box's settings, or the first
    line of what is wrong with them; `address_of(name)` where the front dials it (the deploy's address for it)."""
    known = list(hosts)
    lines = []
    for name in s.front_of:
        said = f"settings: front_of: {name}"
        if name == front:
            lines.append(f"{said} is this box itself: the front always answers for its own box; list the others")
            continue
        if name not in known:
            others = ", ".join(h for h in known if h != front) or "none"
            lines.append(f"{said} is not a host of the inventory (the others: {others})")
            continue
        box, address = settings_of(name), address_of(name)
        if not (DNS_NAME.match(address) or is_ip(address)):
            lines.append(f"{said} is reached at {address!r}, neither a DNS name nor an IP address (its ssh_hostname)")
        elif isinstance(box, str):
            lines.append(f"{said}'s own settings are not valid: {box}")
        elif box.lan_serving != "proxy" or box.lan_tls != "local_ca":
            lines.append(
                f"{said} has lan_serving: {box.lan_serving}, lan_tls: {box.lan_tls}; a front reaches each box "
                "through its proxy and checks its certificate against its local CA (proxy, local_ca)"
            )
        elif model_of(box) != model_of(s):
            lines.append(
                f"{said} serves {model_of(box)}, this box {model_of(s)}: a front's boxes must serve the same model "
                "(nginx cannot route by the request's model field)"
            )
    return lines
