"""bin/rig check's first step: try each box's address, port and login before pyinfra runs, and say in one
line per box what to do when one fails (vllm_rig/reach.py). Exit 0 when every box let us in.

    .venv/bin/python -m vllm_rig.cli.reach inventory.py [--limit HOST]...
    .venv/bin/python -m vllm_rig.cli.reach inventory/sandbox.py
Other pyinfra options are accepted and ignored (bin/rig hands its options to both steps).
"""

from __future__ import annotations

import argparse
import fnmatch
import runpy
import sys
from pathlib import Path
from typing import Any

from vllm_rig.reach import diagnose, host_connection

REPO = Path(__file__).resolve().parents[2]
SANDBOX_INVENTORY = "inventory/sandbox.py"


def hosts(inventory: str) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(name, its groups, its data) for each host the inventory file lists."""
    if inventory == SANDBOX_INVENTORY:
        groups = {k: v for k, v in runpy.run_path(str(REPO / inventory)).items() if not k.startswith("_")}
        listed = {"sandbox": groups["sandbox"][0], "qwen38": groups.get("qwen38", [])}
    else:
        from vllm_rig.inventory_file import load_groups

        listed = {g: hs for g, (hs, _) in load_groups(REPO / "inventory" / "hosts.yml", REPO / "group_data").items()}
    out: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for group, members in listed.items():
        for name, data in members:
            out.setdefault(name, ([], data))[0].append(group)
    return [(name, groups, data) for name, (groups, data) in out.items()]


def selected(all_hosts: list[tuple[str, list[str], dict[str, Any]]], limits: list[str]) -> list:
    """pyinfra's --limit: a host's name or one of its groups, glob patterns allowed."""
    if not limits:
        return all_hosts
    pats = [p for limit in limits for p in limit.split(",")]
    return [h for h in all_hosts if any(fnmatch.fnmatch(n, p) for p in pats for n in (h[0], *h[1]))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bin/rig check")
    ap.add_argument("inventory")
    ap.add_argument("--limit", action="append", default=[])
    ns, _ = ap.parse_known_args(argv)
    sandbox = ns.inventory == SANDBOX_INVENTORY
    try:
        boxes = selected(hosts(ns.inventory), ns.limit)
    except Exception as err:  # noqa: BLE001 - the inventory's own one line (InventoryError) or what broke
        print(f"check: inventory: {err}", file=sys.stderr)
        return 1
    failed = 0
    for name, _, data in boxes:
        address, port, user, key, password = host_connection(name, data)
        line = diagnose(address, port, user, key, password=password, sandbox=sandbox)
        if line is None:
            print(f"check: {name}: SSH to {user}@{address} port {port} works")
        else:
            failed += 1
            print(f"check: {name}: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
