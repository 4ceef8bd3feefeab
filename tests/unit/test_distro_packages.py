"""Distribution packages read with one dpkg query for the names asked, installed only where missing."""

from __future__ import annotations

import subprocess

from tests.unit.fake_host import plan
from vllm_rig.core.packages import PackageVersions, distro_packages
from vllm_rig.stages.driver.keyring import keyring_deb


def test_the_fact_reads_real_dpkg_for_the_names_asked() -> None:
    fact = PackageVersions()
    out = subprocess.run(
        fact.command(packages=("dpkg", "libc6", "no-such-package-vllm-rig")), shell=True, capture_output=True, text=True
    )
    found = fact.process(out.stdout.splitlines())
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True).stdout
    assert found["dpkg"] == version
    assert "libc6" in found  # Multi-Arch: same prints libc6:amd64
    assert "no-such-package-vllm-rig" not in found


def test_removed_but_configured_packages_count_as_missing() -> None:
    assert PackageVersions().process(["@@dpkg", "gcc\t4:12.2.0-3\tii ", "dkms\t3.0\trc ", "git\t1:2.39\thi "]) == {
        "gcc": "4:12.2.0-3",
        "git": "1:2.39",
    }


def test_only_missing_packages_are_installed_without_recommends() -> None:
    found = {"dpkg-query": ["@@dpkg", "gcc\t4:12.2.0-3\tii ", "make\t4.3-4.1\tii "]}
    changes, commands = plan(found, distro_packages, packages=["gcc", "make", "ccache", "g++"])
    assert changes and len(commands) == 1
    assert commands[0].endswith("install --no-install-recommends ccache g++")
    assert "DPkg::Lock::Timeout=600" in commands[0]
    assert plan(found, distro_packages, packages=["gcc", "make"]) == (False, [])
    assert plan({}, distro_packages, packages=["dkms"])[1][0].endswith(" dkms")  # dpkg printed nothing


def test_the_keyring_is_installed_unless_that_version_is() -> None:
    url = "https://example.invalid/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
    assert plan({"dpkg-query": ["@@dpkg", "cuda-keyring\t1.1-1\tii "]}, keyring_deb, url=url) == (False, [])
    changes, commands = plan({"dpkg-query": ["@@dpkg", "cuda-keyring\t1.0-1\tii "]}, keyring_deb, url=url)
    # through apt, which waits for the dpkg lock (dpkg -i fails at once while unattended-upgrades holds it)
    assert changes and "install --no-install-recommends /tmp/vllm-rig-cuda-keyring.deb" in commands[0]
    assert "DPkg::Lock::Timeout=600" in commands[0] and "dpkg -i" not in commands[0]
    assert plan({}, keyring_deb, url=url)[0]  # a fresh box: dpkg knows no keyring


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
