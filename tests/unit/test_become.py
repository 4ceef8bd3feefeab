"""Root without sudo: a host reached as root switches sudo off before the first fact; others keep it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_rig.core import become


class _Data(dict):
    def __getattr__(self, key: str) -> Any:
        return self[key]

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class _Host:
    def __init__(self, name: str, uid: str, sudo: bool = True) -> None:
        self.name, self.uid, self.data, self.asked = name, uid, _Data(_sudo=sudo), []

    def run_shell_command(self, command: Any, **kwargs: Any) -> tuple[bool, Any]:
        self.asked.append((str(command), kwargs))
        return True, SimpleNamespace(stdout=self.uid)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    become._decided.clear()


def test_a_root_login_turns_sudo_off_asking_without_sudo() -> None:
    box = _Host("root-box", "0\n")
    assert become.sudo_args(box) == {"_sudo": False}
    assert box.data["_sudo"] is False
    assert box.asked == [("id -u", {"_sudo": False})]  # asking through sudo would fail on a box without it
    become.sudo_args(box)
    assert len(box.asked) == 1  # once per host per run


def test_a_user_login_keeps_sudo() -> None:
    box = _Host("user-box", "1000\n")
    assert become.sudo_args(box) == {"_sudo": True} and box.data["_sudo"] is True


def test_a_host_without_sudo_in_its_settings_is_not_asked() -> None:
    box = _Host("plain", "1000\n", sudo=False)
    assert become.sudo_args(box) == {"_sudo": False} and box.asked == []


def test_odd_output_is_not_root() -> None:
    assert become.parse_uid("sh: id: not found") is None
    assert become.parse_uid("motd line\n0\n") == 0


def test_no_operation_hard_codes_sudo() -> None:
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    hits = [
        f"{p.relative_to(root)}:{i}"
        for p in [*root.glob("vllm_rig/**/*.py"), *root.glob("tasks/*.py")]
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"_sudo\s*=\s*True", line)
    ]
    assert hits == []
