"""The machine images: a debootstrapped Debian 12 tree, and the same tree made to identify as Ubuntu 24.04;
each cached as a tarball, unpacked per machine.

Building (debootstrap) takes minutes and is done once per fingerprint; unpacking a machine from the
tarball takes seconds. The tarballs live in paths.CACHE so fresh checkouts on one host share them.

The Ubuntu 24.04 image ("noble on bookworm") exists because the sandbox reaches Debian's archive and not
Ubuntu's, so no real noble tree can be debootstrapped. It is the bookworm image plus Ubuntu 24.04's identity
files (os-release, lsb-release, issue, dpkg's vendor): what the deploy and apt read to decide the OS.
Everything else (kernel, python, systemd, apt, dpkg, glibc) stays bookworm's; tests/sandbox/README.md
("The Ubuntu 24.04 machine") lists each difference.
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

DEBIAN12 = "debian12"
UBUNTU2404 = "ubuntu2404"
OSES = (DEBIAN12, UBUNTU2404)
# Bump when the Ubuntu identity changes in a way _NOBLE_IDENTITY does not capture.
NOBLE_VERSION = 1

# base-files 13ubuntu10 (noble's release pocket): /usr/lib/os-release, /etc/lsb-release, /etc/issue(.net);
# dpkg's origins/ubuntu. Point releases (noble-updates) say "24.04.N LTS" in PRETTY_NAME and VERSION.
NOBLE_OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""
NOBLE_LSB_RELEASE = """DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=24.04
DISTRIB_CODENAME=noble
DISTRIB_DESCRIPTION="Ubuntu 24.04 LTS"
"""
NOBLE_DPKG_ORIGIN = """Vendor: Ubuntu
Vendor-URL: https://www.ubuntu.com/
Bugs: https://bugs.launchpad.net/ubuntu/+filebug
Parent: Debian
"""
# Ubuntu's base-files says "trixie/sid" here (the Debian release it branched from).
NOBLE_DEBIAN_VERSION = "trixie/sid"

# Runs inside a copy of the bookworm tree. The identity files are diverted (dpkg-divert --local, without
# --rename: base-files is Essential and they are overwritten right after), so a base-files upgrade during
# a deploy writes Debian's versions beside them (*.distrib) instead of over them. The user joins `sudo`
# and `adm`, where Ubuntu's installer and cloud-init put the first user.
_NOBLE_IDENTITY = f"""
set -eu
for f in /usr/lib/os-release /etc/lsb-release /etc/issue /etc/issue.net /etc/debian_version; do
    dpkg-divert --quiet --local --no-rename --add "$f"
done
cat > /usr/lib/os-release <<'EOF'
{NOBLE_OS_RELEASE}EOF
cat > /etc/lsb-release <<'EOF'
{NOBLE_LSB_RELEASE}EOF
printf '%s\\n\\n' 'Ubuntu 24.04 LTS \\n \\l' > /etc/issue
echo 'Ubuntu 24.04 LTS' > /etc/issue.net
echo '{NOBLE_DEBIAN_VERSION}' > /etc/debian_version
cat > /etc/dpkg/origins/ubuntu <<'EOF'
{NOBLE_DPKG_ORIGIN}EOF
ln -sfn ubuntu /etc/dpkg/origins/default
usermod -a -G sudo,adm {RIG_USER}
"""

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


def fingerprint(os_name: str = DEBIAN12) -> str:
    """Short hash of everything that decides the image's content (the Ubuntu one: the bookworm one's too)."""
    inputs: dict[str, object] = {
        "suite": SUITE,
        "variant": VARIANT,
        "packages": sorted(PACKAGES),
        "version": IMAGE_VERSION,
    }
    inputs["configure"] = _CONFIGURE
    if os_name == UBUNTU2404:
        inputs = {"base": fingerprint(DEBIAN12), "identity": _NOBLE_IDENTITY, "version": NOBLE_VERSION}
    elif os_name != DEBIAN12:
        raise ValueError(f"no image for {os_name!r}; one of {', '.join(OSES)}")
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def tarball_path(os_name: str = DEBIAN12) -> Path:
    label = SUITE if os_name == DEBIAN12 else f"noble-on-{SUITE}"
    return paths.CACHE / f"rootfs-{label}-{fingerprint(os_name)}.tar.zst"


def _run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _debootstrap(target: Path) -> None:
    # No mirror argument: debootstrap uses its default.
    cmd = ["debootstrap", f"--variant={VARIANT}", "--include=" + ",".join(PACKAGES), SUITE, str(target)]
    _run(cmd, stdout=subprocess.DEVNULL)


def _configure(target: Path, script: str = _CONFIGURE) -> None:
    _run(["chroot", str(target), "/bin/sh", "-c", script], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


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


def build(force: bool = False, os_name: str = DEBIAN12) -> Path:
    """Return the cached tarball, debootstrapping it first if it is missing. Safe to run concurrently.
    The Ubuntu 24.04 image is made from the bookworm one (built first if missing), not debootstrapped."""
    out = tarball_path(os_name)
    base = build(force=False) if os_name == UBUNTU2404 else None  # before the lock: it takes it too
    paths.CACHE.mkdir(parents=True, exist_ok=True)
    with (paths.CACHE / "rootfs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists() and not force:
            return out
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rootfs-", dir=paths.CACHE) as tmp:
            tree = Path(tmp) / "tree"
            if base is not None:
                print(f"rootfs: Ubuntu 24.04 identity on {base.name} ...", flush=True)
                _extract(base, tree)
                t1 = time.monotonic()
                _configure(tree, _NOBLE_IDENTITY)
            else:
                print(f"rootfs: debootstrap {SUITE} ({VARIANT}, {len(PACKAGES)} extra packages) ...", flush=True)
                _debootstrap(tree)
                t1 = time.monotonic()
                _configure(tree)
            _pack(tree, out)
            t2 = time.monotonic()
        print(f"rootfs: base {t1 - t0:.0f}s, configure+pack {t2 - t1:.0f}s -> {out.name}", flush=True)
        return out


def _extract(src: Path, dest: Path) -> None:
    """zstd -dc | tar -x of an image into dest (made here)."""
    dest.mkdir(parents=True)
    zstd = subprocess.Popen(["zstd", "-q", "-dc", str(src)], stdout=subprocess.PIPE)
    tar = subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "--acls", "-xpf", "-", "-C", str(dest)],
        stdin=zstd.stdout,
        check=False,
    )
    assert zstd.stdout is not None
    zstd.stdout.close()
    if zstd.wait() != 0 or tar.returncode != 0:
        raise RuntimeError(f"unpacking {src} into {dest} failed")


def unpack(dest: Path, os_name: str = DEBIAN12) -> None:
    """Unpack the image of os_name into dest, which must not exist yet."""
    src = build(os_name=os_name)
    t0 = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    _extract(src, tmp)
    tmp.rename(dest)
    print(f"rootfs: unpacked {dest.name} in {time.monotonic() - t0:.1f}s", flush=True)


def main(argv: list[str]) -> int:
    force = "--force" in argv
    for os_name in [a for a in argv if a in OSES] or [DEBIAN12]:
        print(build(force=force, os_name=os_name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
