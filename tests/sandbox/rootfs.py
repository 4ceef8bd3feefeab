"""The machine image: a debootstrapped Debian 12 tree, cached as a tarball, unpacked per machine.

Building (debootstrap) takes minutes and is done once per fingerprint; unpacking a machine from the
tarball takes seconds. The tarball lives in paths.CACHE so fresh checkouts on one host share it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.sandbox import paths

SUITE = "bookworm"
VARIANT = "minbase"
# Bump when the image changes in a way the inputs below do not capture.
IMAGE_VERSION = 1

# What a fresh server has, plus what the deploy needs to be driven over SSH. No locales package:
# C.UTF-8 ships with libc. apt-transport-https is not needed: bookworm's apt speaks https itself.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "openssh-server",
    "sudo",
    "python3",
    "python3-venv",
    "ca-certificates",
    "curl",
    "git",
    "iproute2",
    "kmod",
    "procps",
    "gnupg",
    "less",
    "xz-utils",
)

# Timers and units that would run apt or poke the system behind the deploy's back, or that make no
# sense in a container sharing the host's network.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily.service",
    "apt-daily-upgrade.timer",
    "apt-daily-upgrade.service",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-networkd.service",
    "systemd-networkd-wait-online.service",
    "systemd-timesyncd.service",
    "systemd-resolved.service",
)

RIG_USER = "rig"

# Runs inside the chroot once, after debootstrap: everything that is the same for every machine.
# Per-machine things (hostname, machine-id, ssh host keys, sshd port, authorized key) are set when a
# machine is unpacked, in machine.py.
_CONFIGURE = f"""
set -eu
for u in {" ".join(MASKED_UNITS)}; do ln -sf /dev/null /etc/systemd/system/$u; done
useradd --create-home --shell /bin/bash {RIG_USER}
echo '{RIG_USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{RIG_USER}
chmod 0440 /etc/sudoers.d/{RIG_USER}
install -d -m 0700 -o {RIG_USER} -g {RIG_USER} /home/{RIG_USER}/.ssh
# Host keys are made per machine; the machine-id is made per machine.
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
: > /etc/fstab
apt-get clean
"""


def fingerprint() -> str:
    """Short hash of everything that decides the image's content."""
    inputs = {"suite": SUITE, "variant": VARIANT, "packages": sorted(PACKAGES), "version": IMAGE_VERSION}
    inputs["configure"] = _CONFIGURE
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def tarball_path() -> Path:
    return paths.CACHE / f"rootfs-{SUITE}-{fingerprint()}.tar.zst"


def _run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _debootstrap(target: Path) -> None:
    # No mirror argument: debootstrap uses its default.
    cmd = ["debootstrap", f"--variant={VARIANT}", "--include=" + ",".join(PACKAGES), SUITE, str(target)]
    _run(cmd, stdout=subprocess.DEVNULL)


def _configure(target: Path) -> None:
    _run(["chroot", str(target), "/bin/sh", "-c", _CONFIGURE], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def _pack(tree: Path, out: Path) -> None:
    """tar | zstd into out, atomically (write to a temp name, then rename)."""
    tmp = out.with_suffix(".partial")
    with tmp.open("wb") as fh:
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--xattrs", "--acls", "-C", str(tree), "-cf", "-", "."],
            stdout=subprocess.PIPE,
        )
        zstd = subprocess.run(["zstd", "-q", "-T0", "-3"], stdin=tar.stdout, stdout=fh, check=False)
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or zstd.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"packing {tree} failed")
    tmp.rename(out)


def build(force: bool = False) -> Path:
    """Return the cached tarball, debootstrapping it first if it is missing. Safe to run concurrently."""
    out = tarball_path()
    paths.CACHE.mkdir(parents=True, exist_ok=True)
    with (paths.CACHE / "rootfs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists() and not force:
            return out
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rootfs-", dir=paths.CACHE) as tmp:
            tree = Path(tmp) / "tree"
            print(f"rootfs: debootstrap {SUITE} ({VARIANT}, {len(PACKAGES)} extra packages) ...", flush=True)
            _debootstrap(tree)
            t1 = time.monotonic()
            _configure(tree)
            _pack(tree, out)
            t2 = time.monotonic()
        print(f"rootfs: debootstrap {t1 - t0:.0f}s, configure+pack {t2 - t1:.0f}s -> {out.name}", flush=True)
        return out


def unpack(dest: Path) -> None:
    """Unpack the image into dest, which must not exist yet."""
    src = build()
    t0 = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    zstd = subprocess.Popen(["zstd", "-q", "-dc", str(src)], stdout=subprocess.PIPE)
    tar = subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "--acls", "-xpf", "-", "-C", str(tmp)],
        stdin=zstd.stdout,
        check=False,
    )
    assert zstd.stdout is not None
    zstd.stdout.close()
    if zstd.wait() != 0 or tar.returncode != 0:
        raise RuntimeError(f"unpacking {src} into {tmp} failed")
    tmp.rename(dest)
    print(f"rootfs: unpacked {dest.name} in {time.monotonic() - t0:.1f}s", flush=True)


def main(argv: list[str]) -> int:
    force = "--force" in argv
    print(build(force=force))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
