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

# Why a GPU did not come up, in the driver's own words; each message spans lines that the driver breaks
# where its version pleases, every line starting "NVRM: " (after dmesg's or the journal's prefix):
#   "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:25a0)\nNVRM: installed in this system is not supported
#    by the\nNVRM: NVIDIA 520.56.06 driver release." (the release dropped or does not know the card)
#   "... installed in this system is not supported by open\nNVRM: nvidia.ko because it does not include the
#    required GPU\nNVRM: System Processor (GSP)." (the open module on a card older than Turing)
#   "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\nNVRM: BAR0 is 0M @ 0x0
#    (PCI:0000:06:00.0)" (the firmware left the BAR unassigned)
#   "NVRM: GPU 0000:13:00.0: GPU does not have the necessary power cables connected."
GAP = r"\s+(?:NVRM:\s+)?"  # between two words of one message: a space or a line break and its "NVRM: "


def _words(text: str) -> str:
    return GAP.join(re.escape(word) for word in text.split())


GPU_HEAD = rf"NVRM: The NVIDIA GPU {BUS}{GAP}\(PCI ID: ([0-9A-Fa-f]{{4}}:[0-9A-Fa-f]{{4}})\){GAP}"
UNSUPPORTED = re.compile(
    GPU_HEAD
    + _words("installed in this system is not supported by the")
    + rf"{GAP}NVIDIA{GAP}([0-9][0-9.]*){GAP}driver{GAP}release"
)
NO_GSP = re.compile(
    GPU_HEAD
    + _words(
        "installed in this system is not supported by open nvidia.ko because it does not include the required GPU "
        "System Processor"
    )
)
BAR_INVALID = re.compile(
    _words("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:")
    + rf"{GAP}BAR(\d) is (\d+)M @ (0x[0-9A-Fa-f]+) \({BUS}\)"
)
NO_POWER = re.compile(rf"NVRM: GPU {BUS}: GPU does not have the necessary power cables connected")

# The same lines for `grep -E` on the journal (the boot-time guard): one line of each event.
GUARD_PATTERN = "NVRM: Xid |has fallen off the bus|NVRM: fallen off the bus|RmInitAdapter failed|probe routine failed"


def normal(text: str) -> str:
    """The kernel's lines as `journalctl -o cat` prints them, whatever printed them: a line break that a
    log kept escaped (rsyslog's "#012", /dev/kmsg's "\x0a") made real, and the prefix before "NVRM:" (a
    dmesg time stamp, a journal or syslog date in any format and locale, a host name, "kernel:") cut off."""
    text = text.replace("#012", "\n").replace("\\x0a", "\n")
    return re.sub(r"(?m)^[^\n]*?(?=NVRM:)", "", text)


def xid_events(text: str) -> list[tuple[str, int]]:
    return [(bus, int(code)) for bus, code in XID_LINE.findall(text)]


def events(text: str) -> list[tuple[int, str]]:
    """(offset, phrase) of every event in the text, Xid or not, in the order the kernel logged them."""
    text = normal(text)
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
    for m in UNSUPPORTED.finditer(text):
        found.append(
            (m.start(), f"GPU {m.group(1)} (PCI ID {m.group(2)}) is not supported by the NVIDIA {m.group(3)} release")
        )
    for m in NO_GSP.finditer(text):
        found.append((m.start(), f"GPU {m.group(1)} (PCI ID {m.group(2)}) has no GSP, which the open module needs"))
    for m in BAR_INVALID.finditer(text):
        bar, mib, at, bus = m.groups()
        found.append((m.start(), f"BAR{bar} of {bus} is {mib}M @ {at}: the firmware left it unassigned"))
    for m in NO_POWER.finditer(text):
        found.append((m.start(), f"GPU {m.group(1)} does not have the necessary power cables connected"))
    return sorted(found)


def quoted(pattern: re.Pattern[str], text: str) -> str | None:
    """The kernel's message that `pattern` matches, on one line, as the owner would grep for it."""
    m = pattern.search(normal(text))
    return re.sub(rf"{GAP}", " ", m.group(0)).strip() if m else None


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
