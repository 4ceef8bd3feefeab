"""`bin/rig remove` ends with what it left on the box, each with its size where it has one and how to remove it:
the model, the held driver, CUDA, NVIDIA's apt source, the nouveau blacklist, nginx with its stub site."""

from __future__ import annotations

from typing import Any

from tests.unit.groupdata import profile_data
from vllm_rig.stages.remove.deploy import LeftBehind, left_lines
from vllm_rig.validation import load_settings

# What the box's commands print (du -sb: bytes, a tab, the path; dpkg-query: Installed-Size in KiB).
FOUND = {
    "model": ["29012345678\t/opt/models/qwen3.6-27b"],
    "held": ["cuda-drivers", "nvidia-driver-580-open", "libnvidia-compute-580"],
    "driver_kib": ["512000", "20480", "1024"],
    "cuda": ["7340032000\t/usr/local/cuda-13.0/"],
    "apt_source": ["/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list"],
    "nouveau": ["/etc/modprobe.d/vllm-rig-blacklist-nouveau.conf"],
    "nginx": ["ii  1484"],
    "nginx_stub": ["# vllm-rig: the distribution's default site (port 80) stays off on this box"],
    "record": ['{"version": "580.95.05"}'],
}


def _settings(**changes: Any):
    return load_settings({**profile_data(), **changes})


def test_a_plain_remove_says_everything_it_left_with_sizes_and_how() -> None:
    assert left_lines(FOUND, _settings()) == [
        "the model at /opt/models/qwen3.6-27b (29.0 GB): bin/rig remove --with-model",
        "the NVIDIA driver and CUDA packages, 3 held, 546.3 MB installed: bin/rig remove --with-driver",
        "CUDA /usr/local/cuda-13.0 (7.3 GB): bin/rig remove --with-driver",
        "NVIDIA's apt source /etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list: bin/rig remove --with-driver",
        "the nouveau blacklist /etc/modprobe.d/vllm-rig-blacklist-nouveau.conf (the open-source driver stays off): "
        "bin/rig remove --with-driver",
        "nginx (1.5 MB) with a stub default site (port 80 off): sudo apt-get purge nginx nginx-common on the box",
    ]


def test_what_this_remove_takes_is_not_said_as_left() -> None:
    left = left_lines(FOUND, _settings(remove_model=True, remove_driver=True))
    assert left == [
        "nginx (1.5 MB) with a stub default site (port 80 off): sudo apt-get purge nginx nginx-common on the box"
    ]


def test_a_driver_that_is_not_the_rigs_is_said_as_yours() -> None:
    left = left_lines({**FOUND, "record": []}, _settings(remove_driver=True))
    driver = [line for line in left if line.startswith("the NVIDIA driver and CUDA packages, 3 held")]
    assert driver and "not installed by vllm-rig" in driver[0]


def test_an_empty_box_leaves_nothing() -> None:
    assert left_lines(LeftBehind.default(), _settings()) == []


# pyinfra's Users fact prints one line per account: passwd entry|primary group|groups|lastlog|password hash.
USERS = {
    "lastlog": [
        "vllm:x:998:998::/var/lib/vllm:/usr/sbin/nologin|vllm|vllm video||!",
        "ann:x:1000:1000::/home/ann:/bin/bash|ann|ann||x",
    ]
}


def test_the_service_user_is_removed_but_a_login_user_of_that_name_is_not() -> None:
    from tests.unit.fake_host import plan
    from vllm_rig.stages.remove.deploy import system_user_removed

    assert plan(USERS, system_user_removed, user="vllm") == (True, ["userdel vllm"])
    assert plan(USERS, system_user_removed, user="ann") == (False, [])
    assert plan(USERS, system_user_removed, user="nobody-here") == (False, [])
