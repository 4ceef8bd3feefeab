"""front_of's checks: the settings of one box, the check across the boxes it names (one line each, before any
host is touched), through the real CLI too, and the key line the front keeps per box."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.settings import Settings
from vllm_rig.stages.front import check
from vllm_rig.stages.front.facts import BEARER_TOKEN, key_line
from vllm_rig.validation import SettingsError, load_settings

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).with_name("pyinfra")


def _settings(**more: object) -> Settings:
    return load_settings({**profile_data(), **more})


def _lines(front: Settings, boxes: dict[str, Settings | str], address: str | None = None) -> list[str]:
    return check.problems("a", front, ["a", *boxes], boxes.__getitem__, lambda name: address or f"{name}.lan")


def _refused(**more: object) -> str:
    with pytest.raises(SettingsError) as err:
        _settings(**more)
    [line] = err.value.lines
    return line


def test_boxes_of_the_same_model_pass() -> None:
    assert _lines(_settings(front_of=["b", "c"]), {"b": _settings(), "c": _settings(lan_port=9443)}) == []


def test_each_bad_box_is_one_line() -> None:
    front = _settings(front_of=["a", "b", "c", "d", "e", "f", "g"])
    other_model = _settings(model="qwen38", models_keep=0)
    lines = check.problems(
        "a",
        front,
        ["a", "b", "c", "d", "e", "g"],
        {
            "b": other_model,
            "c": _settings(lan_serving="direct"),
            "d": "settings: gpu_count=0 is not allowed: ...",
            "e": _settings(served_model_name="other-name"),
            "g": _settings(),
        }.__getitem__,
        lambda name: "bad address!" if name == "g" else f"{name}.lan",
    )
    assert lines == [
        "settings: front_of: a is this box itself: the front always answers for its own box; list the others",
        f"settings: front_of: b serves {check.model_of(other_model)}, this box {check.model_of(front)}: a front's "
        "boxes must serve the same model (nginx cannot route by the request's model field)",
        "settings: front_of: c has lan_serving: direct, lan_tls: local_ca; a front reaches each box through its "
        "proxy and checks its certificate against its local CA (proxy, local_ca)",
        "settings: front_of: d's own settings are not valid: settings: gpu_count=0 is not allowed: ...",
        f"settings: front_of: e serves {check.model_of(_settings(served_model_name='other-name'))}, this box "
        f"{check.model_of(front)}: a front's boxes must serve the same model (nginx cannot route by the request's "
        "model field)",
        "settings: front_of: f is not a host of the inventory (the others: b, c, d, e, g)",
        "settings: front_of: g is reached at 'bad address!', neither a DNS name nor an IP address (its ssh_hostname)",
    ]


def test_the_front_box_itself_must_be_a_proxy_with_a_local_ca_and_its_own_port() -> None:
    assert _refused(front_of=["b"], lan_serving="direct", vllm_host="0.0.0.0").startswith(
        "settings: front_of=['b'] is not allowed: needs lan_serving: proxy and lan_tls: local_ca"
    )
    assert _refused(front_of=["b"], front_port=8443) == (
        "settings: front_port=8443 is not allowed: must differ from lan_port (8443) and vllm_port (8000)"
    )
    assert "must be an inventory host name" in _refused(front_of=["b; rm -rf /"])
    assert "names b more than once" in _refused(front_of=["b", "b"])


def test_the_key_line_holds_only_a_bearer_token() -> None:
    assert key_line("abc-_.~+/9==") == 'proxy_set_header Authorization "Bearer abc-_.~+/9==";\n'
    for bad in ("a$b", 'a"b', "a b", "a;b", "a\\b", "a=b", "", "a\nb"):
        assert not BEARER_TOKEN.match(bad), bad
    assert BEARER_TOKEN.match("Zk3_-w8x" * 5 + "abc")  # what secrets.token_urlsafe(32) makes


def test_the_real_cli_stops_a_front_of_an_unknown_box_with_one_line() -> None:
    args = [str(PYINFRA), "-y", "@fake/x", "deploy.py", "--dry", "--data", 'front_of=["nobox"]']
    run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "Traceback" not in out and "Ready: deploy.py" not in out, out
    lines = [line.strip() for line in out.splitlines() if "settings: " in line]
    assert lines == ["[@fake/x] settings: front_of: nobox is not a host of the inventory (the others: none)"], out
