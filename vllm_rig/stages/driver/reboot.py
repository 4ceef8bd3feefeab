"""Reboot a host only when the driver needs it, know it happened by its boot id, and never twice for
the same driver and kernel.

pyinfra's server.reboot always reboots and confirms with uptime, which does not reset inside containers
and is fragile elsewhere; /proc/sys/kernel/random/boot_id changes on every boot, everywhere.

Before it reboots, the host records what it reboots for ("<driver version> <kernel>"). When the module
is still not loaded after that reboot, another reboot would not help: the host stops with the reason
it can read (no module: the DKMS build and its make.log; the kernel's Secure Boot refusal; the open
modules' BAR1 refusal), and so does every later run until the module loads or the driver or kernel
changes.
"""

from __future__ import annotations

import re
import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.connectors.local import LocalConnector
from pyinfra.facts.files import FileContents

from vllm_rig.core.checks import fail_host
from vllm_rig.host import nvrm
from vllm_rig.paths import STATE_DIR
from vllm_rig.stages.driver.facts import Driver, DriverState, ModuleFailure

REBOOTED_FOR = f"{STATE_DIR}/rebooted-for-driver"  # "<version> <kernel>" of the last driver reboot


def reboot_reasons(state: Driver, version: str) -> list[str]:
    """Why this host must boot again before the driver works ([] when it need not)."""
    reasons = []
    installed = any(v.split("-", 1)[0] == version for v in state["packages"].values())
    if state["nouveau_loaded"]:
        reasons.append("nouveau is loaded")
    if installed and state["loaded_version"] != version:
        reasons.append(f"the loaded module is {state['loaded_version'] or 'none'}, installed is {version}")
    return reasons


# The kernel refusing an unsigned module, in every wording a real box printed (tests/unit/fixtures/tool_outputs/
# kernel-log/README.md): signature enforcement's "Loading of unsigned module is rejected" / "... with unavailable
# key is rejected", modprobe's and systemd-modules-load's EKEYREJECTED and ENOKEY, and a lockdown kernel's only
# line. "module verification failed: ... tainting kernel" is NOT one: the kernel prints it for a module it loaded.
SIGNATURE_REFUSAL = re.compile(
    r"Loading of (?:unsigned )?module (?:with unavailable key )?is rejected|Key was rejected by service|"
    r"Required key not available|Lockdown: [^ :]+: (?:unsigned module loading|Loading of unsigned module) is restricted"
)
# modprobe's own failure under lockdown is EPERM, in the box's language ("Operation not permitted",
# "Vorgang nicht zulässig"): a refusal only beside the lockdown line.
INSERT_FAILED = re.compile(r"(?:could not insert|Failed to insert module) '?nvidia[a-z_-]*'?: .+")


def _message(line: str) -> str:
    """The kernel's or modprobe's words of a journal line, its prefix (a date, a host, a time stamp) cut."""
    starts = [m.start() for m in (SIGNATURE_REFUSAL.search(line), INSERT_FAILED.search(line)) if m]
    return line[min(starts) :] if starts else line


def _first(pattern: re.Pattern[str], lines: list[str]) -> str | None:
    return next((line for line in lines if pattern.search(line)), None)


def module_failure_reason(diag: dict, version: str) -> str:
    """One line on why nvidia.ko is not there after a reboot, from ModuleFailure, with the way out. The
    kernel's journal lines are read whatever their prefix (a date in any format or locale, a host name)."""
    kernel = diag.get("kernel") or "the running kernel"
    journal = [line.strip() for line in diag.get("journal", []) if line.strip()]
    text = "\n".join(journal)
    refused = _first(SIGNATURE_REFUSAL, journal)
    if refused:
        said = _message(refused)
        if "Lockdown:" in said and (insert := _first(INSERT_FAILED, journal)):
            said = f"{said}; {_message(insert)}"
        return (
            f"the kernel refused the module under Secure Boot ({said}): enroll the key dkms signs with "
            "(the preflight's secure boot line gives the steps), or disable Secure Boot"
        )
    for line in journal:
        if "kbusIsStaticBar1Supported" in line:
            return (
                f"the open module refused the GPUs ({line}): set nvidia_driver_flavor=proprietary, or enable "
                "Resizable BAR / Above 4G decoding in the firmware"
            )
    xids = "; ".join(nvrm.xid_phrase(bus, code) for bus, code in dict.fromkeys(nvrm.xid_events(text)))
    also = f" (the kernel also logged {xids})" if xids else ""
    if quote := nvrm.quoted(nvrm.NO_GSP, text):
        return (
            f"the open kernel module does not support this GPU ({quote}): set "
            f"nvidia_driver_flavor=proprietary and run the deploy again{also}"
        )
    if quote := nvrm.quoted(nvrm.UNSUPPORTED, text):
        return (
            f"the NVIDIA {version} driver release does not support a GPU in the box ({quote}): remove that card, or "
            f"set nvidia_driver_version to a release whose README lists it (Appendix A){also}"
        )
    if quote := nvrm.quoted(nvrm.BAR_INVALID, text):
        return (
            f"the firmware left a GPU's PCI region unassigned ({quote}): not the cards or the driver. In the "
            "firmware setup enable Above 4G decoding (and Resizable BAR where offered), update the BIOS if that "
            "does not help, or boot Linux with pci=realloc (GRUB_CMDLINE_LINUX), then run the deploy again" + also
        )
    if quote := nvrm.quoted(nvrm.NO_POWER, text):
        return (
            f"a GPU has no power from its PCIe cables ({quote}): power the box off, connect both 8-pin PCIe power "
            f"cables of every card (from the PSU, not a splitter), then run the deploy again{also}"
        )
    said = nvrm.describe(text)
    if said:  # the driver loaded but a GPU did not come up: hardware, power or firmware, not the packages
        return (
            f"the driver could not bring the GPUs up ({said}): power the box off (a cold boot, not a reboot), "
            "reseat the cards and their power cables, then run the deploy again"
        )
    if not diag.get("module_file"):
        log = diag.get("make_log") or []
        if log:
            return (
                f"there is no nvidia module for kernel {kernel}: the DKMS build failed, see {log[0]} "
                f"(it ends: {log[-1]})"
            )
        status = "; ".join(diag.get("dkms") or []) or "nothing"
        return (
            f"there is no nvidia module for kernel {kernel} (dkms status: {status}): install "
            f"linux-headers-{kernel}, then run sudo dkms autoinstall -k {kernel}"
        )
    return f"{diag['module_file']} is there but was not loaded: see journalctl -b | grep -i -e nvidia -e NVRM"


def ask_refusal(why: str) -> str:
    """driver_reboot: ask: the host stops here; the owner reboots when it suits, and the next run goes on."""
    return f"the driver needs a reboot ({why}); driver_reboot is ask: reboot the box, then run again"


def _rebooted_for(version: str, kernel: str | None) -> str:
    return f"{version} {kernel or '?'}"


# Own operation: pyinfra's server.reboot always reboots and confirms it by uptime, which a container does not reset;
# this one reboots only for the driver, at most once for it, and confirms by the boot id.
@operation(is_idempotent=True)
def reboot_if_needed(version: str, timeout: int = 600, ask: bool = False):
    """Reboot when the installed driver is not the loaded one (or nouveau holds the GPUs), then wait for a
    new boot id; at most once for a driver version and kernel. Never reboots the machine pyinfra runs on,
    nor a box whose owner reboots it (`ask`, driver_reboot: ask): those stop with what to do instead."""
    state = host.get_fact(DriverState)
    reasons = reboot_reasons(state, version)
    record = "\n".join(host.get_fact(FileContents, path=REBOOTED_FOR) or []).strip()
    key = _rebooted_for(version, state.get("kernel"))
    if not reasons:
        if record:
            yield StringCommand(f"rm -f {REBOOTED_FOR}")  # it loaded (after a fix): a later failure may reboot again
        else:
            host.noop("no reboot needed")
        return
    why = "; ".join(reasons)
    if record == key:
        yield FunctionCommand(_stop_with_reason, (version, why), {})
        return
    if ask:
        yield FunctionCommand(fail_host, (ask_refusal(why),), {})
        return
    if isinstance(host.connector, LocalConnector):
        refusal = (
            f"a reboot is needed ({why}); this is the machine running pyinfra, so reboot it yourself and run "
            "the deploy again"
        )
        yield FunctionCommand(fail_host, (refusal,), {})
        return
    before: list[str] = []
    yield FunctionCommand(lambda state, host: before.append(_boot_id(host) or ""), (), {})
    logger.info(f"[{host.name}] rebooting: {why}")
    yield StringCommand(f"mkdir -p {STATE_DIR} && echo '{key}' > {REBOOTED_FOR}")
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")
    yield FunctionCommand(_wait_for_new_boot, (before, timeout), {})
    yield FunctionCommand(_after_reboot, (version,), {})


def _after_reboot(state, host, version: str) -> bool:  # noqa: ARG001
    """The reboot is done: forget it when the module loaded, else stop with the reason."""
    now = host.get_fact(DriverState)
    reasons = reboot_reasons(now, version)
    if not reasons:
        host.run_shell_command(f"rm -f {REBOOTED_FOR}", _sudo=bool(host.data.get("_sudo", False)))  # as the host's ops
        return True
    return _stop_with_reason(state, host, version, "; ".join(reasons))


def _stop_with_reason(state, host, version: str, why: str) -> bool:
    diag = host.get_fact(ModuleFailure, version=version)
    return fail_host(
        state,
        host,
        f"nvidia {version} is still not loaded after a reboot for it ({why}); not rebooting again: "
        f"{module_failure_reason(diag, version)}",
    )


def _boot_id(host) -> str | None:
    """The kernel's boot id, new after every boot (uptime does not reset inside a container)."""
    lines = host.get_fact(FileContents, path="/proc/sys/kernel/random/boot_id")
    return lines[0].strip() if lines else None


def _wait_for_new_boot(state, host, before: list[str], timeout: int) -> bool:  # noqa: ARG001
    host.disconnect()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(2)
        host.connect(show_errors=False)
        if host.connected:
            now = _boot_id(host)
            if now and now != before[0]:
                logger.info(f"[{host.name}] back after reboot (boot id {now[:8]})")
                return True
            host.disconnect()  # reachable but not rebooted yet
    logger.error(f"[{host.name}] did not come back with a new boot id within {timeout}s; check its console")
    return False
