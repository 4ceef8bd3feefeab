"""Distribution packages installed only where missing (pyinfra's apt.packages, waiting for the dpkg lock); the
lists refreshed when they do not know a package about to be installed."""

from __future__ import annotations

import subprocess

from pyinfra.operations import apt

from tests.unit.fake_host import plan
from vllm_rig.core.packages import LOCK_WAIT
from vllm_rig.stages.driver.keyring import keyring_deb

# What core.packages.distro_packages gives pyinfra's apt.packages.
INSTALL = {"no_recommends": True, "extra_install_args": LOCK_WAIT}


DPKG_L = [
    "ii  gcc            4:12.2.0-3   amd64  GNU C compiler",
    "ii  make           4.3-4.1      amd64  utility for directing compilation",
    "rc  dkms           3.0          all    Dynamic Kernel Module System",
    "hi  git            1:2.39       amd64  fast, scalable, distributed revision control system",
]


def test_only_missing_packages_are_installed_without_recommends_waiting_for_the_lock() -> None:
    found = {"dpkg -l": DPKG_L}
    changes, commands = plan(found, apt.packages, packages=["gcc", "make", "ccache", "g++"], **INSTALL)
    assert changes and len(commands) == 1
    assert "install --no-install-recommends -o DPkg::Lock::Timeout=600 ccache g++" in commands[0]
    assert plan(found, apt.packages, packages=["gcc", "make", "git"], **INSTALL) == (False, [])
    assert plan(found, apt.packages, packages=["dkms"], **INSTALL)[1][0].endswith(" dkms")  # removed, config kept
    assert plan({}, apt.packages, packages=["dkms"], **INSTALL)[1][0].endswith(" dkms")  # dpkg printed nothing


def test_the_keyring_is_installed_unless_that_version_is() -> None:
    url = "https://example.invalid/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
    installed = "ii  cuda-keyring   {}   all   NVIDIA CUDA keyring"
    key = "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert plan({"dpkg -l": [installed.format("1.1-1")]}, keyring_deb, url=url, fingerprint=key) == (False, [])
    changes, commands = plan({"dpkg -l": [installed.format("1.0-1")]}, keyring_deb, url=url, fingerprint=key)
    # through apt, which waits for the dpkg lock (dpkg -i fails at once while unattended-upgrades holds it)
    assert changes and "install --no-install-recommends /tmp/vllm-rig-cuda-keyring.deb" in commands[0]
    assert "DPkg::Lock::Timeout=600" in commands[0] and "dpkg -i" not in commands[0]
    assert commands[0].index(key) < commands[0].index("install --no-install-recommends /tmp")  # checked first
    assert plan({}, keyring_deb, url=url, fingerprint=key)[0]  # a fresh box: dpkg knows no keyring


POLICY = [
    "nvidia-driver-pinning-580.159.03:",
    "  Installed: (none)",
    "  Candidate: 580.159.03-1",
    "  Version table:",
    "dkms:",
    "  Installed: 3.4.0-1",
    "  Candidate: (none)",
]


def test_lists_are_refreshed_when_a_needed_package_is_not_in_them() -> None:
    from vllm_rig.core.packages import lists_fresh

    fresh_lists = {"apt-cache policy": ["@@age", "60", "@@policy", *POLICY]}
    names = ["nvidia-driver-pinning-580.159.03", "dkms"]
    assert plan(fresh_lists, lists_fresh, packages=names) == (False, [])  # known (or installed), an hour old
    # a driver version published after the box's last refresh: its pinning package is not in the lists yet
    changes, commands = plan(fresh_lists, lists_fresh, packages=[*names, "nvidia-driver-pinning-580.159.05"])
    assert changes and commands[0].startswith("apt-get -q -o DPkg::Lock::Timeout=600 update")
    assert "touch /var/lib/vllm-rig/apt-lists.stamp" in commands[0]


def test_lists_older_than_a_day_are_refreshed() -> None:
    from vllm_rig.core.apt_lists import AptLists, refresh_reason

    old = AptLists().process(["@@age", str(2 * 86400), "@@policy", *POLICY])
    assert refresh_reason(old, ("dkms",), 86400) == "the package lists are 48 h old"
    never = AptLists().process(["@@age", "@@policy", *POLICY])
    assert refresh_reason(never, ("dkms",), 86400) == "the package lists were never refreshed"


def test_the_lists_fact_runs_on_this_machine() -> None:
    from vllm_rig.core.apt_lists import AptLists

    fact = AptLists()
    out = subprocess.run(
        fact.command(packages=("dpkg", "no-such-package-vllm-rig")), shell=True, capture_output=True, text=True
    )
    found = fact.process(out.stdout.splitlines())
    assert found["packages"]["dpkg"]["installed"] and "no-such-package-vllm-rig" not in found["packages"]
    assert found["age_s"] is None or found["age_s"] >= 0
