"""The service user read with one command and changed only where it differs."""

from __future__ import annotations

import subprocess

import pytest

from tests.unit.fake_host import plan
from vllm_rig.core.users import SystemUser, system_user

USER = dict(user="vllm", home="/var/lib/vllm", shell="/usr/sbin/nologin", groups=["video", "render"])
PASSWD = "vllm:x:998:998::/var/lib/vllm:/usr/sbin/nologin"


def _read(name: str):
    fact = SystemUser()
    out = subprocess.run(fact.command(user=name), shell=True, capture_output=True, text=True, check=True)
    return fact.process(out.stdout.splitlines())


def _found(passwd: str = "", groups: str = "", primary: str = "", home_owner: str = "") -> dict[str, list[str]]:
    """What SystemUser's command prints, section by section."""
    out = ["@@passwd", passwd, "@@groups", groups, "@@primary", primary, "@@home_owner", home_owner]
    return {"getent passwd": out}


def test_the_fact_reads_a_real_account_and_none_for_a_missing_one() -> None:
    root = _read("root")
    assert root is not None and root["home"] == "/root" and root["home_owner"] == "root:root"
    assert "root" not in root["groups"]  # the primary group is not a secondary one
    assert _read("no-such-user-vllm-rig") is None


def test_a_missing_user_is_made_with_home_shell_and_groups() -> None:
    changes, commands = plan(_found(), system_user, **USER)
    assert changes and len(commands) == 1
    assert "useradd -r -m -d /var/lib/vllm -s /usr/sbin/nologin -G video,render" in commands[0]
    assert "-g vllm vllm" in commands[0]  # a leftover group of the same name is reused, not an error


def test_an_account_as_wanted_is_left_alone() -> None:
    found = _found(PASSWD, "vllm render video", "vllm", "vllm:vllm")
    assert plan(found, system_user, **USER) == (False, [])


def test_only_what_differs_is_changed() -> None:
    found = _found(PASSWD.replace("nologin", "false"), "vllm video", "vllm", "root:root")
    changes, commands = plan(found, system_user, **USER)
    assert changes
    assert commands == [
        "usermod -s /usr/sbin/nologin -G video,render vllm",
        "mkdir -p /var/lib/vllm && chown vllm:vllm /var/lib/vllm",
    ]


def test_no_gpu_groups_leaves_the_groups_alone() -> None:
    found = _found(PASSWD, "vllm docker", "vllm", "vllm:vllm")
    assert plan(found, system_user, **{**USER, "groups": []}) == (False, [])


def test_the_service_user_is_planned_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyinfra.context import ctx_host

    from tests.unit.groupdata import profile_data
    from vllm_rig.core import users
    from vllm_rig.paths import Layout
    from vllm_rig.validation import load_settings

    class Box:  # a run's Host object
        name = "box"

    planned: list[tuple[str, ...]] = []
    monkeypatch.setattr(users, "system_user", lambda **kw: planned.append(tuple(kw["groups"])))
    layout = Layout.of(load_settings(profile_data()))
    with ctx_host.use(Box()):
        users.service_user(layout, ["video"])  # the runtime stage
        users.service_user(layout, ["video"])  # the service stage
        users.service_user(layout, ["video", "render"])  # other groups: planned again
    assert planned == [("video",), ("video", "render")]
