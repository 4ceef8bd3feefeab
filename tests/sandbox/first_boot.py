"""What a fresh box does by itself at its first boot, laid into a machine's tree before it boots.

unattended-upgrades on a fresh Ubuntu 24.04 box (apt-daily-upgrade.service, soon after the first boot)
holds the dpkg locks for minutes while it installs security updates. The stand-in holds the same two
locks, /var/lib/dpkg/lock-frontend and /var/lib/dpkg/lock, with the same kind of lock apt and dpkg take
(fcntl record locks, not flock), for a set time, once, and records when it held them.
"""

from __future__ import annotations

import os
from pathlib import Path

UNIT = "standin-unattended-upgrades.service"
RECORD = "/var/lib/standin-unattended-upgrades/held"  # "<start epoch> <end epoch>" once it let go

_SCRIPT = """#!/usr/bin/python3
# Sandbox stand-in for unattended-upgrades at first boot: hold the dpkg locks for a while.
import fcntl, os, sys, time
seconds = float(sys.argv[1])
held = []
for path in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    held.append(fd)
start = time.time()
print(f"unattended-upgrades (stand-in): holding the dpkg lock for {seconds:.0f}s", flush=True)
time.sleep(seconds)
end = time.time()
os.makedirs(os.path.dirname(RECORD), exist_ok=True)
with open(RECORD, "w") as fh:
    fh.write(f"{start:.0f} {end:.0f}\\n")
"""

_UNIT = """[Unit]
Description=Unattended Upgrades at first boot (sandbox stand-in: holds the dpkg lock)
ConditionPathExists=!{record}

[Service]
Type=simple
ExecStart=/usr/local/sbin/standin-unattended-upgrade {seconds}

[Install]
WantedBy=multi-user.target
"""


def unattended_upgrades_holding_lock(root: Path, seconds: float) -> None:
    """Make the machine tree at `root` hold the dpkg locks for `seconds` from its next (first) boot on."""
    script = root / "usr/local/sbin/standin-unattended-upgrade"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_SCRIPT.replace("RECORD", repr(RECORD)))
    script.chmod(0o755)
    unit = root / "etc/systemd/system" / UNIT
    unit.write_text(_UNIT.format(record=RECORD, seconds=seconds))
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / UNIT
    if not link.is_symlink():
        os.symlink(f"/etc/systemd/system/{UNIT}", link)
