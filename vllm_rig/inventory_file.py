"""Read inventory/hosts.yml into pyinfra groups.

Each host becomes ("name", {ssh data, per-host settings}) and joins the group named after its profile,
so group_data/<profile>.py applies to it. Problems become one line each, naming the file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from vllm_rig.reach import address_problem, key_problem
from vllm_rig.settings import Settings

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
# Settings that are names, not numbers: YAML reads `python_version: 3.10` as the float 3.1.
TEXT_VERSION_KEYS = frozenset(k for k in Settings.model_fields if k.endswith("_version")) | {"gpu_compute_capability"}
YAML_NUMBER_TAGS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")

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
    problem = _node_problem(path, yaml.compose(path.read_text(), Loader=yaml.SafeLoader))
    if problem:
        raise InventoryError(problem)
    if isinstance(doc, dict):
        _check_top_level(path, doc)
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict) or not hosts:
        raise InventoryError(f"{path} must have a 'hosts:' mapping with at least one host (see hosts.example.yml)")
    return hosts


def _check_top_level(path: Path, doc: dict[Any, Any]) -> None:
    """The file has one key, hosts: anything else at the top would be read by nobody, silently."""
    for key in doc:
        if key == "hosts":
            continue
        if key == "all":
            raise InventoryError(
                f"{path}: 'all:' is Ansible's layout, which this file does not read: list each box under 'hosts:' "
                "(see inventory/hosts.example.yml); a setting for every box goes in group_data/all.py"
            )
        if key in Settings.model_fields:
            raise InventoryError(
                f"{path}: {key} at the top level is not read: put it under hosts: <host>: settings: "
                "(or in group_data/all.py for every box)"
            )
        raise InventoryError(
            f"{path}: top-level key {key} is not read; the file has one key, 'hosts:' (see inventory/hosts.example.yml)"
        )


def _node_problem(path: Path, root: yaml.Node | None) -> str | None:
    """What the parsed data can no longer show: a key given twice (YAML keeps the last and drops the first
    silently) and a version written as a number (3.10 becomes 3.1). Checked on the YAML nodes, which keep
    the text as written and its line."""
    if not isinstance(root, yaml.MappingNode):
        return None
    problem = _duplicate(path, root, "")
    hosts = _value(root, "hosts")
    if problem or not isinstance(hosts, yaml.MappingNode):
        return problem
    problem = _duplicate(path, hosts, "hosts")
    for name_node, entry in hosts.value:
        if problem or not isinstance(entry, yaml.MappingNode):
            break
        problem = _duplicate(path, entry, f"host {name_node.value}")
        settings = _value(entry, "settings")
        if not problem and isinstance(settings, yaml.MappingNode):
            problem = _duplicate(path, settings, f"host {name_node.value}: settings") or _number_version(
                path, name_node.value, settings
            )
    return problem


def _duplicate(path: Path, mapping: yaml.MappingNode, where: str) -> str | None:
    seen: dict[str, int] = {}
    for key_node, _ in mapping.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        line = key_node.start_mark.line + 1
        first = seen.setdefault(key_node.value, line)
        if first == line:
            continue
        if where == "hosts":
            return (
                f"{path}: host {key_node.value} is listed twice (lines {first} and {line}); YAML would keep only "
                "the second and drop the first box silently: give each box its own name"
            )
        prefix = f"{where}: " if where else ""
        return f"{path}: {prefix}{key_node.value} is given twice (lines {first} and {line}); keep one"
    return None


def _number_version(path: Path, host: str, settings: yaml.MappingNode) -> str | None:
    for key_node, value_node in settings.value:
        if key_node.value in TEXT_VERSION_KEYS and value_node.tag in YAML_NUMBER_TAGS:
            key, text = key_node.value, value_node.value
            return (
                f"{path}: host {host}: {key}: {text} is read by YAML as the number {yaml.safe_load(text)}; "
                f'quote it: {key}: "{text}"'
            )
    return None


def _value(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    return next((v for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


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
    misplaced = sorted(HOST_KEYS & set(settings))
    if misplaced:
        raise InventoryError(
            f"{path}: host {name}: {misplaced[0]} is under 'settings:', where it is not read; "
            "move it up one level, beside ssh_hostname"
        )
    data = {key: entry[key] for key in SSH_KEYS if key in entry}
    problem = address_problem(str(data.get("ssh_hostname") or name))
    if problem:
        raise InventoryError(f"{path}: host {name}: ssh_hostname {problem}")
    if "ssh_key" in data:
        data["ssh_key"] = _ssh_key(path, name, data["ssh_key"])
    # group_data/all.py runs everything through sudo; a root login needs none (and may have no sudo).
    become = {"_sudo": False} if entry.get("ssh_user") == "root" else {}
    return {**data, **become, **settings, "profile": profile}


def _ssh_key(path: Path, name: str, value: Any) -> str:
    """The key file must exist here, on the control machine: else paramiko's error surfaces as a traceback."""
    key = Path(str(value)).expanduser()
    problem = key_problem(str(value))
    if problem:
        raise InventoryError(f"{path}: host {name}: ssh_key {problem}")
    if not key.is_file():
        raise InventoryError(
            f"{path}: host {name}: ssh_key {value} is no file on this machine; point ssh_key at your private key "
            f"or make one: ssh-keygen -t ed25519 -f {value}"
        )
    return str(key)


def _known_profiles(group_data_dir: Path) -> set[str]:
    """A profile is a group_data file other than all.py; 'default' means all.py alone."""
    return {p.stem for p in group_data_dir.glob("*.py") if p.stem != "all"} | {DEFAULT_PROFILE}
