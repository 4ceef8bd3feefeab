"""Install a repository's keyring .deb from its URL once; no download when that version is installed.

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


# Own operation: pyinfra's apt.deb downloads the .deb again wherever /tmp lost it (a re-run reports a change)
# and installs it with dpkg -i, which does not wait for the dpkg lock.
@operation()
def keyring_deb(url: str):
    name, version = parse_deb_filename(url)
    if version in host.get_fact(DebPackages).get(name, ()):
        host.noop(f"{name} {version} is installed")
        return
    tmp, src = f"/tmp/vllm-rig-{name}.deb", shlex.quote(url)
    yield f"(curl -fsSL -o {tmp} {src} || wget -q -O {tmp} {src}) && {APT_INSTALL} {tmp} && rm -f {tmp}"
