"""Install a repository's keyring .deb from its URL once; no download when that version is installed.

The keyring is the root of trust for everything apt installs from that repository, and it comes from the
same URL as the repository: a mirror or a network in the middle could hand over its own key and then sign
its own driver. So the .deb is opened before it is installed and every key in its keyrings must be the one
fingerprint the control machine holds (nvidia_repo_key_fingerprint); anything else stops the host in one
line with nothing installed. gpg (Ubuntu's, from its own signed archive) lists the keys.

The .deb goes in through apt (`apt-get install /path.deb`), not `dpkg -i`: dpkg fails at once while
another process holds the dpkg lock (unattended-upgrades on a fresh box's first boot, for minutes), apt
waits for it as long as DPkg::Lock::Timeout says.

pyinfra's apt.deb downloads to /tmp on every run where the file is gone (after any reboot), which makes
a re-run report a change. The keyring's name and version are in its file name (name_version_arch.deb).
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.deb import DebPackages

from vllm_rig.core.packages import APT_INSTALL


def parse_deb_filename(url: str) -> tuple[str, str]:
    """(name, version) from .../cuda-keyring_1.1-1_all.deb."""
    name, version, _arch = url.rsplit("/", 1)[-1].removesuffix(".deb").split("_")
    return name, version


def key_check(deb: str, url: str, fingerprint: str) -> str:
    """Shell that exits 1 with one line unless every primary key in the .deb's keyrings is `fingerprint`. A
    subshell: one step of the operation's `&&` chain, its temporary directory removed on every way out."""
    said = shlex.quote(f"the keyring package from {url} holds the key(s) ")
    why = shlex.quote(
        f", not the repository's signing key {fingerprint} (nvidia_repo_key_fingerprint): a mirror or the "
        "network handed over another key; nothing was installed"
    )
    primaries = "awk -F: '/^pub:/{p=1;next} /^fpr:/{if(p)print $10; p=0}'"
    return (
        "(d=$(mktemp -d) || exit 1; trap 'rm -rf \"$d\"' EXIT; "
        f'dpkg-deb -x {deb} "$d/root" || {{ rm -f {deb}; exit 1; }}; '
        'found=$(for k in "$d"/root/usr/share/keyrings/* "$d"/root/etc/apt/trusted.gpg.d/*; do [ -f "$k" ] && '
        'GNUPGHOME="$d" gpg --batch --show-keys --with-colons "$k" 2>/dev/null; done '
        f"| {primaries} | sort -u | paste -sd' '); "
        f'[ "$found" = {shlex.quote(fingerprint)} ] || '
        f'{{ echo {said}"${{found:-none}}"{why} >&2; rm -f {deb}; exit 1; }})'
    )


# Own operation: pyinfra's apt.deb downloads the .deb again wherever /tmp lost it (a re-run reports a change),
# installs it with dpkg -i, which does not wait for the dpkg lock, and checks no key in it.
@operation()
def keyring_deb(url: str, fingerprint: str):
    name, version = parse_deb_filename(url)
    if version in host.get_fact(DebPackages).get(name, ()):
        host.noop(f"{name} {version} is installed")
        return
    tmp, src = f"/tmp/vllm-rig-{name}.deb", shlex.quote(url)
    gpg = f"{{ command -v gpg >/dev/null || {APT_INSTALL} gpg >/dev/null; }}"
    yield (
        f"{gpg} && (curl -fsSL -o {tmp} {src} || wget -q -O {tmp} {src}) && {key_check(tmp, url, fingerprint)} && "
        f"{APT_INSTALL} {tmp} && rm -f {tmp}"
    )
