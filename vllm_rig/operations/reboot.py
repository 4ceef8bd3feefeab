"""Reboot a host only when the driver needs it, and know it happened by its boot id.

pyinfra's server.reboot always reboots and confirms with uptime, which does not reset inside containers
and is fragile elsewhere; /proc/sys/kernel/random/boot_id changes on every boot, everywhere.
"""

from __future__ import annotations

import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.connectors.local import LocalConnector

from vllm_rig.facts.driver import BootId, DriverState
from vllm_rig.operations.checks import fail_host


def reboot_reasons(state: dict, version: str) -> list[str]:
    """Why this host must boot again before the driver works ([] when it need not)."""
    reasons = []
    installed = any(v.split("-", 1)[0] == version for v in state["packages"].values())
    if state["nouveau_loaded"]:
        reasons.append("nouveau is loaded")
    if installed and state["loaded_version"] != version:
        reasons.append(f"the loaded module is {state['loaded_version'] or 'none'}, installed is {version}")
    return reasons


@operation(is_idempotent=True)
def reboot_if_needed(version: str, timeout: int = 600):
    """Reboot when the installed driver is not the loaded one (or nouveau holds the GPUs), then wait for a
    new boot id. Never reboots the machine pyinfra runs on: that stops with what to do instead."""
    reasons = reboot_reasons(host.get_fact(DriverState), version)
    if not reasons:
        host.noop("no reboot needed")
        return
    why = "; ".join(reasons)
    if isinstance(host.connector, LocalConnector):
        refusal = (
            f"a reboot is needed ({why}); this is the machine running pyinfra, so reboot it yourself and run "
            "the deploy again"
        )
        yield FunctionCommand(fail_host, (refusal,), {})
        return
    before: list[str] = []
    yield FunctionCommand(lambda state, host: before.append(host.get_fact(BootId)), (), {})
    logger.info(f"[{host.name}] rebooting: {why}")
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")
    yield FunctionCommand(_wait_for_new_boot, (before, timeout), {})


def _wait_for_new_boot(state, host, before: list[str], timeout: int) -> bool:  # noqa: ARG001
    host.disconnect()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(2)
        host.connect(show_errors=False)
        if host.connected:
            now = host.get_fact(BootId)
            if now and now != before[0]:
                logger.info(f"[{host.name}] back after reboot (boot id {now[:8]})")
                return True
            host.disconnect()  # reachable but not rebooted yet
    logger.error(f"[{host.name}] did not come back with a new boot id within {timeout}s; check its console")
    return False
