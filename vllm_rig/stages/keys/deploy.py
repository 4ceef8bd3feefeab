"""Keys (on demand): the client keys of the LAN proxy (docs/lan.md, "A key for each client").

    pyinfra inventory.py tasks/keys.py --data keys_action=add --data keys_name=laptop   (or bin/rig keys add laptop)

add makes NAME's key on the box (root only; never printed: the run says how to read it there), revoke deletes it
and remembers it was revoked, so a deploy whose api_keys still names it does not make it again. Either rebuilds
nginx's key map and reloads nginx (the server is not restarted: it is always sent its own key). list prints
the names, when each was made and its requests since the last read (this or bin/rig status).
"""

from __future__ import annotations

import shlex
import time

from pyinfra import host, logger
from pyinfra.api import deploy, operation

from vllm_rig import paths
from vllm_rig.core import end_of_run
from vllm_rig.core.host_package import host_programs
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.chat_page import layout as chat
from vllm_rig.stages.chat_page.deploy import page_with_its_key
from vllm_rig.stages.keys import reads
from vllm_rig.stages.keys.facts import KeyListing
from vllm_rig.stages.lan.deploy import LOADED_FILES, LOADED_STAMP
from vllm_rig.stages.lan.facts import ClientKeys, lan_keys
from vllm_rig.stages.lan.operations import key_map, nginx_loaded
from vllm_rig.stages.summary.deploy import connection, ssh_command


@operation()
def key_added(package: str, keys_dir: str, key_name: str):
    """The key's file on the box, made there (a revoked name gets a new key)."""
    found = host.get_fact(ClientKeys, package=package, keys_dir=keys_dir)
    if key_name in found["keys"]:
        host.noop(f"{key_name} has a key already (bin/rig keys revoke {key_name}, then add, for a new one)")
        return
    yield lan_keys(package, "add", "--dir", keys_dir, key_name)


@operation()
def key_revoked(package: str, keys_dir: str, key_name: str):
    """The key's file deleted, its name recorded as revoked."""
    found = host.get_fact(ClientKeys, package=package, keys_dir=keys_dir)
    if key_name not in found["keys"] and key_name in found["revoked"]:
        host.noop(f"{key_name} is revoked already")
        return
    yield lan_keys(package, "revoke", "--dir", keys_dir, key_name)  # no such key: one line, and the run fails


def read_command(s: Settings, name: str) -> str:
    """How the owner reads NAME's key on the box, from this machine."""
    conn = connection(host)
    sudo = [] if conn.get("ssh_user") == "root" else ["sudo"]
    return shlex.join([*ssh_command(conn), *sudo, "cat", f"{paths.KEYS_DIR}/{name}"])


def listing_lines(found: dict) -> list[str]:
    """The listing as lines: names, when made, requests since the last read (never a key)."""
    if not found:
        return ["no client keys: the host programs are not on this box yet (deploy first)"]
    since = found.get("since") or 0
    window = f"since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}" if since else "in the log"
    keys = found.get("keys") or {}
    lines = [f"{len(keys)} client key(s) in {paths.KEYS_DIR}; requests {window} (the last read)"]
    for name, info in sorted(keys.items()):
        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.get("made") or 0))
        lines.append(f"  {name:<32} made {made}  {info.get('requests', 0)} request(s)")
    lines.append(f"  {'server (the server’s own key)':<32} {'':<16}  {found.get('server', 0)} request(s)")
    lines.append(f"  {'- (no key or a wrong one)':<32} {'':<16}  {found.get('without_key', 0)} request(s)")
    for name in sorted(found.get("revoked") or {}):
        lines.append(f"  {name:<32} revoked")
    return lines


@deploy("Keys")
def manage_keys(s: Settings) -> None:
    layout = Layout.of(s)
    package = layout.host_package
    if s.keys_action == "list":
        found = host.get_fact(
            KeyListing,
            package=package,
            keys_dir=paths.KEYS_DIR,
            log=paths.LAN_ACCESS_LOG,
            since=reads.last_read(host.name),
        )
        logger.info("\n".join(f"[{host.name}] {line}" for line in listing_lines(found)))
        if found.get("now"):
            reads.mark_read(host.name, float(found["now"]))
        return
    name = s.keys_name or ""
    host_programs(package)
    if s.keys_action == "add":
        key_added(
            name=f"A key for {name}, made on the box (root only)",
            package=package,
            keys_dir=paths.KEYS_DIR,
            key_name=name,
        )
    else:
        key_revoked(name=f"{name}'s key revoked", package=package, keys_dir=paths.KEYS_DIR, key_name=name)
    key_map(
        name="The proxy's key check, from the service's API key and the client keys",
        package=package,
        keys_dir=paths.KEYS_DIR,
        env_file=layout.env_file,
        map_file=paths.LAN_KEY_MAP,
    )
    nginx_loaded(
        name="nginx checked and reloaded (the server keeps running)",
        paths=LOADED_FILES,
        stamp=LOADED_STAMP,
        port=s.lan_port,
    )
    if s.chat_page and name == chat.KEY_NAME:  # the page takes its new key (or none) now, not at the next deploy
        page_with_its_key(s)
    said: tuple[str, ...]
    if s.keys_action == "add":
        said = (
            f"next: give {name} its key, read on the box (root only): {read_command(s, name)}",
            f"next: clients send it as 'Authorization: Bearer <key>'; bin/rig keys revoke {name} takes it back",
        )
    else:
        said = (f"next: {name}'s key is refused from now on; every other key works as before",)
    end_of_run.lines_said(name="What to do next", lines=said)
