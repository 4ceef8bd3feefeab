"""No setting injects anything: every string setting, and every string inside a mapping or list setting, is
tried with hostile characters (a line break, ;, $(), backquotes, quotes, %, NUL, a space, a backslash) through
every renderer and command builder that takes settings: the service unit and its environment file, the
watchdog units, the bench, verify, update and probe commands, the rollback script and FlashQLA's warm-up.

Either the settings refuse the value in one line naming the key, or each output parses back (systemd's
unquoting for units, its environment-file syntax, POSIX shell words for commands) with the whole value inside
one word: never a second directive, a second command or a split word.
"""

from __future__ import annotations

import re
import shlex
import types
import typing
from typing import Any

import pytest

from tests.systemd_split import parse_env_file, unquote_words
from tests.unit.groupdata import profile_data
from vllm_rig.core.files import render_template
from vllm_rig.paths import Layout
from vllm_rig.settings import JSON_SETTINGS, Settings
from vllm_rig.stages.bench.command import bench_command
from vllm_rig.stages.runtime import plan
from vllm_rig.stages.runtime.deploy import ROLLBACK_TEMPLATE, flashqla_warm_command, rollback_context
from vllm_rig.stages.service.deploy import service_probe_command
from vllm_rig.stages.service.unit import environment_file, render_unit, watchdog_units
from vllm_rig.stages.update.deploy import probe_command
from vllm_rig.stages.verify.deploy import verdict_command
from vllm_rig.validation import SettingsError, load_settings

MARK = "ZZ"  # around each payload: every parsed word holding a mark must hold the whole hostile part
PAYLOADS = ["\n", "\nExecStartPre=+/bin/id", ";id", "$(id)", "`id`", "'\"", "%n", "\x00", " x", "\\", "\r"]
SHELL_SPECIAL = set("$`\"\\;'\n\r\x00 ")


def _is_str(annotation: Any) -> bool:
    """str, a type on str (Annotated[str, ...], setting_types) or either of them or None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_str(args[0])
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    return annotation is str or (union and any(_is_str(arg) for arg in args))


STR_FIELDS = sorted(name for name, field in Settings.model_fields.items() if _is_str(field.annotation))
BASE = profile_data()
# A plausible base for settings whose default is null: the hostile part is appended to it.
NULL_BASE = {"vllm_log_file": "/var/log/vllm.log", "pip_index_url": "https://pypi.example/simple"}


def _cases() -> list[tuple[str, Any]]:
    cases = []
    for payload in PAYLOADS:
        hostile = MARK + payload + MARK
        for name in STR_FIELDS:
            base = BASE.get(name)
            base = NULL_BASE.get(name, "x") if base is None else base
            cases.append((name, base + hostile))
        cases += [
            ("vllm_env", {**BASE["vllm_env"], "VLLM_X": "v" + hostile}),
            ("vllm_env", {**BASE["vllm_env"], "OPENAI_APIKEY": "https://user:pw@h/" + hostile}),
            ("vllm_env", {**BASE["vllm_env"], "VLLM_X" + hostile: "1"}),
            ("vllm_extra_args", ["--enforce-eager" + hostile]),
            ("vllm_extra_args", ["--uvicorn-log-level=info" + hostile]),
        ]
    return cases


CASES = _cases()


def _hostile_parts(value: Any) -> list[str]:
    if isinstance(value, str):
        return re.findall(f"{MARK}.*?{MARK}", value, re.S)
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _hostile_parts(k) + _hostile_parts(v)]
    return [p for item in value for p in _hostile_parts(item)]


def _unit_words(unit: str) -> tuple[list[str], list[str]]:
    """(the directive keys in order, every word of every Exec line) as systemd reads the unit."""
    text = re.sub(r"\\\n\s*", " ", unit)
    keys, words = [], []
    for line in text.split("\n"):
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            keys.append(key)
            if key.startswith("Exec"):
                words += unquote_words(value.lstrip("+"))
        elif line.strip() and not line.startswith(("#", "[")):
            keys.append("<not a directive: " + line + ">")
    return keys, words


def _exposed(command: str) -> str:
    """What of a shell command the shell reads specially: unquoted text and double-quoted text (not single-quoted
    text, a backslash-escaped character or a comment)."""
    out, state, i = [], "", 0
    while i < len(command):
        ch = command[i]
        if state == "'":
            state = "" if ch == "'" else state
        elif ch == "\\":
            i += 1
        elif state == '"':
            state = "" if ch == '"' else state
            out.append(ch)
        elif ch in "'\"":
            state = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            i = command.find("\n", i)
            i = len(command) if i < 0 else i
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _shell_words(command: str, part: str) -> list[str]:
    """The words of a POSIX shell command; a hostile part outside single quotes is refused outright."""
    if MARK in _exposed(command) and set(part) & SHELL_SPECIAL:
        pytest.fail(f"unquoted in {command!r}")
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    return list(lexer)


def _outputs(s: Settings) -> tuple[str, list[tuple[str, str]], list[str], list[str]]:
    """(the unit, the environment file's pairs, the other units' Exec words, the shell commands)."""
    layout = Layout.of(s)
    dirs = plan.RuntimeDirs(s.install_root, "r1")
    watchdog_service, watchdog_timer = watchdog_units(s, layout)
    rollback = render_template(ROLLBACK_TEMPLATE, **rollback_context(s, layout, dirs))
    commands = [
        bench_command(s, layout, s.bench_label, "/var/lib/vllm-rig/bench.json"),
        probe_command(s, layout),
        service_probe_command(s, layout),
        verdict_command(s, layout),
        flashqla_warm_command(s, layout),
        rollback,
    ]
    other = _unit_words(watchdog_service)[1] + _unit_words(watchdog_timer)[1]
    return render_unit(s, layout), parse_env_file(environment_file(s, layout)), other, commands


BASELINE_KEYS = _unit_words(_outputs(load_settings(BASE))[0])[0]


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v!r}" for k, v in CASES])
def test_a_hostile_value_is_refused_in_one_line_or_reaches_every_output_as_one_word(key: str, value: Any) -> None:
    try:
        s = load_settings({**BASE, key: value})
    except SettingsError as err:
        assert len(err.lines) == 1, err.lines
        assert err.lines[0].startswith(f"settings: {key}="), err.lines[0]
        assert "\n" not in err.lines[0] and "\x00" not in err.lines[0]
        return
    assert key not in JSON_SETTINGS
    unit, env, other_words, commands = _outputs(s)
    keys, unit_words = _unit_words(unit)
    assert keys == BASELINE_KEYS, "the unit's directives changed"
    for part in _hostile_parts(value):
        for words in (unit_words, [v for _, v in env], [n for n, _ in env], other_words):
            assert all(part in w for w in words if MARK in w), (part, [w for w in words if MARK in w])
        for command in commands:
            words = _shell_words(command, part)
            assert all(part in w for w in words if MARK in w), (part, command)
    values = dict(env)
    if key == "vllm_env":
        assert {k: values[k] for k in value} == value  # each value read back exactly, from the root-only file
        # and none of them in the world-readable unit: not the hostile part, not a secret off the convention
        assert "user:pw" not in unit and not any(p in unit for p in _hostile_parts(value))


@pytest.mark.parametrize(
    "value",
    [
        {"VLLM_X": "1\nExecStartPre=+/bin/sh -c id"},
        {"VLLM_X\n": "1"},
        ["--enforce-eager\n"],
    ],
)
def test_the_issues_line_breaks_are_refused(value: Any) -> None:
    key = "vllm_env" if isinstance(value, dict) else "vllm_extra_args"
    with pytest.raises(SettingsError) as err:
        load_settings({**BASE, key: value})
    assert err.value.lines[0].startswith(f"settings: {key}=") and len(err.value.lines) == 1


def test_the_issues_served_name_and_install_root_are_refused() -> None:
    for key, value in (("served_model_name", "qwen;cmd;true"), ("install_root", "/opt/x;id")):
        with pytest.raises(SettingsError) as err:
            load_settings({**BASE, key: value})
        assert len(err.value.lines) == 1 and err.value.lines[0].startswith(f"settings: {key}=")


def test_a_stop_string_with_a_line_break_still_reaches_the_server_as_json() -> None:
    s = load_settings({**BASE, "override_generation_config": {"stop": ["\n\n"]}})
    assert s.override_generation_config == {"stop": ["\n\n"]}
    keys, _ = _unit_words(render_unit(s, Layout.of(s)))
    assert keys == BASELINE_KEYS
