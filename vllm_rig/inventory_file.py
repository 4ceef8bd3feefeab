"""Read inventory/hosts.yml into pyinfra groups.

Each host becomes ("name", {ssh data, per-host settings}) and joins the group named after its profile,
so group_data/<profile>.py applies to it. Problems become one line each, naming the file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

# Connection keys a host entry may carry (pyinfra's SSH connector names them so).
SSH_KEYS = frozenset(
    {
        "ssh_hostname",
        "ssh_port",
        "ssh_user",
        "ssh_key",
        "ssh_key_password",
        "ssh_password",
        "ssh_known_hosts_file",
        "ssh_strict_host_key_checking",
        "ssh_config_file",
        "ssh_allow_agent",
    }
)
HOST_KEYS = SSH_KEYS | {"profile", "settings"}
DEFAULT_PROFILE = "default"

Group = tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]


class InventoryError(Exception):
    """The hosts file is missing or malformed; the message says what to do."""


def load_groups(path: Path, group_data_dir: Path) -> dict[str, Group]:
    """Groups for pyinfra: {"gpu_hosts": all hosts, "<profile>": its hosts, ...}."""
    path = Path(os.path.relpath(path))  # messages name the file as the user would type it
    entries = _read_hosts(path)
    profiles = _known_profiles(group_data_dir)
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {"gpu_hosts": []}
    for name, entry in entries.items():
        host = (name, _host_data(path, name, entry, profiles))
        groups["gpu_hosts"].append(host)
        profile = host[1]["profile"]
        if profile != DEFAULT_PROFILE:
            groups.setdefault(profile, []).append(host)
    return {group: (hosts, {}) for group, hosts in groups.items()}


def _read_hosts(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InventoryError(
            f"{path} does not exist: copy inventory/hosts.example.yml to {path} and put your box in it"
        )
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InventoryError(f"{path} is not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict) or not hosts:
        raise InventoryError(f"{path} must have a 'hosts:' mapping with at least one host (see hosts.example.yml)")
    return hosts


def _host_data(path: Path, name: str, entry: Any, profiles: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InventoryError(f"{path}: host {name} must be a mapping with ssh_hostname, ssh_user, ...")
    unknown = sorted(set(entry) - HOST_KEYS)
    if unknown:
        raise InventoryError(
            f"{path}: host {name} has unknown key {unknown[0]}; allowed: {', '.join(sorted(HOST_KEYS))} "
            "(settings go under 'settings:')"
        )
    profile = entry.get("profile", DEFAULT_PROFILE)
    if profile not in profiles:
        raise InventoryError(f"{path}: host {name} has profile {profile!r}; allowed: {', '.join(sorted(profiles))}")
    settings = entry.get("settings") or {}
    if not isinstance(settings, dict):
        raise InventoryError(f"{path}: host {name}: 'settings' must be a mapping of setting: value")
    data = {key: entry[key] for key in SSH_KEYS if key in entry}
    if "ssh_key" in data:
        data["ssh_key"] = str(Path(data["ssh_key"]).expanduser())
    # group_data/all.py runs everything through sudo; a root login needs none (and may have no sudo).
    become = {"_sudo": False} if entry.get("ssh_user") == "root" else {}
    return {**data, **become, **settings, "profile": profile}


def _known_profiles(group_data_dir: Path) -> set[str]:
    """A profile is a group_data file other than all.py; 'default' means all.py alone."""
    return {p.stem for p in group_data_dir.glob("*.py") if p.stem != "all"} | {DEFAULT_PROFILE}
