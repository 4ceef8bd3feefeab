"""`--limit nosuchhost` is an error, not a quiet run that does nothing.

pyinfra 3.10's CLI warns "No host matches found for --limit pattern" and goes on with no host, exiting 0: a
typo in a host name looks like success. The hook wraps the CLI's matcher and checks each pattern first by
the same rule (a group name, else fnmatch on host names); it is installed from our inventories, which the
CLI loads just before it applies --limit. Where the CLI has no such function (another pyinfra), nothing is
wrapped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from fnmatch import fnmatch
from typing import Any

from pyinfra.api.exceptions import NoGroupError

_INSTALLED_MARK = "_vllm_rig_limit"


def install() -> None:
    """Wrap pyinfra_cli.cli._get_inventory_pattern_matches once per process."""
    try:
        from pyinfra_cli import cli  # type: ignore[import-untyped]
    except ImportError:  # pyinfra used as a library, no CLI
        return
    original = getattr(cli, "_get_inventory_pattern_matches", None)
    if original is None or getattr(original, _INSTALLED_MARK, False):
        return

    def matches(inventory: Any, patterns: Iterable[str], option_name: str) -> Any:
        patterns = list(patterns)
        if option_name == "--limit":
            check_limit(inventory, patterns)
        return original(inventory, patterns, option_name)

    setattr(matches, _INSTALLED_MARK, True)
    cli._get_inventory_pattern_matches = matches


def check_limit(inventory: Any, patterns: list[str]) -> None:
    """Exit with one line when a --limit pattern matches no host."""
    for pattern in patterns:
        if not _matches(inventory, pattern):
            names = ", ".join(host.name for host in inventory)
            sys.exit(f"--limit {pattern} matches no host or group; the hosts are: {names}")


def _matches(inventory: Any, pattern: str) -> bool:
    try:
        return bool(inventory.get_group(pattern))
    except NoGroupError:
        return any(fnmatch(host.name, pattern) for host in inventory)
