"""The NVIDIA kernel lines that say a GPU failed: Xid events, and the lines that carry no Xid number (a GPU
fallen off the bus, RmInitAdapter failed, the probe routine failed), each named in one short phrase.

Read by the watchdog (each round's kernel log) and the driver stage (why the module brought no GPU up);
the boot-time guard (files/driver/vllm-rig-gpu-guard.sh) greps GUARD_PATTERN. Stdlib only.
"""

from __future__ import annotations

import re

# The kernel line: "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus." (older drivers print the
# bus id without "PCI:"). Meanings from NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/.
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),")
XID_MEANING = {
    8: "GPU stopped processing (channel idle timeout)",
    13: "graphics engine exception",
    31: "GPU memory page fault (MMU fault)",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing (a channel was reset)",
    45: "preemptive cleanup after earlier errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapper failure",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

BUS = r"(?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
# Lines without an Xid number, as real boxes printed them (tests/unit/fixtures/tool_outputs/kernel-log/):
#   "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus." (beside Xid 79, or alone)
#   "NVRM: The NVIDIA GPU 0000:b3:00.0\n NVRM: (PCI ID: 10de:26b5) installed in this system has\n
#    NVRM: fallen off the bus and is not responding to commands." (one message over three lines, no Xid)
#   "NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)" (older drivers: no bus id)
#   "NVRM: The NVIDIA probe routine failed for 1 device(s)."
FALLEN_OFF = re.compile(rf"NVRM: GPU (?:at )?{BUS}:? (?:GPU )?has fallen off the bus")
FALLEN_OFF_LONG = re.compile(
    rf"NVRM: The NVIDIA GPU {BUS}(?:(?!NVRM: The NVIDIA GPU).){{0,300}}?NVRM: fallen off the bus", re.DOTALL
)
RM_INIT_FAILED = re.compile(rf"NVRM: (?:GPU {BUS}: )?RmInitAdapter failed! \(([0-9A-Fa-fx:]+)\)")
PROBE_FAILED = re.compile(r"NVRM: The NVIDIA probe routine failed for (\d+) device\(s\)")

# The same lines for `grep -E` on the journal (the boot-time guard): one line of each event.
GUARD_PATTERN = "NVRM: Xid |has fallen off the bus|NVRM: fallen off the bus|RmInitAdapter failed|probe routine failed"


def xid_events(text: str) -> list[tuple[str, int]]:
    return [(bus, int(code)) for bus, code in XID_LINE.findall(text)]


def events(text: str) -> list[tuple[int, str]]:
    """(offset, phrase) of every event in the text, Xid or not, in the order the kernel logged them."""
    found = [(m.start(), xid_phrase(m.group(1), int(m.group(2)))) for m in XID_LINE.finditer(text)]
    xid79 = [m.group(1) for m in XID_LINE.finditer(text) if m.group(2) == "79"]
    covered = []
    for pattern in (FALLEN_OFF, FALLEN_OFF_LONG):
        for m in pattern.finditer(text):
            covered.append(m.end())
            # The companion of an Xid 79 on the same GPU says nothing new.
            if not any(m.group(1).startswith(bus) for bus in xid79):
                found.append((m.start(), f"GPU {m.group(1)} has fallen off the bus (no Xid)"))
    for m in re.finditer("NVRM: fallen off the bus", text):
        if m.end() not in covered:  # the long message's last line without its first (a grep kept only it)
            found.append((m.start(), "a GPU has fallen off the bus (no Xid)"))
    for m in RM_INIT_FAILED.finditer(text):
        where = f" on {m.group(1)}" if m.group(1) else ""
        found.append(
            (m.start(), f"RmInitAdapter failed{where} ({m.group(2)}): the driver could not initialize the GPU")
        )
    for m in PROBE_FAILED.finditer(text):
        found.append((m.start(), f"the driver's probe failed for {m.group(1)} GPU(s)"))
    return sorted(found)


def xid_phrase(bus: str, code: int) -> str:
    meaning = XID_MEANING.get(code, "see NVIDIA's Xid catalog")
    return f"Xid {code} on {bus} ({meaning})"


def describe(text: str) -> str:
    """'Xid 79 on 0000:01:00 (GPU has fallen off the bus) x2; RmInitAdapter failed on ...' in first-seen
    order, each phrase once with its count; "" when the text has none."""
    counts: dict[str, int] = {}
    for _, phrase in events(text):
        counts[phrase] = counts.get(phrase, 0) + 1
    return "; ".join(phrase + (f" x{n}" if n > 1 else "") for phrase, n in counts.items())
