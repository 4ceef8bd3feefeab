"""Turn host data into Settings, or into one readable line per problem.

A line names the key, the value and what is allowed: `settings: max_model_len=300000 is not allowed:
must be at most 262144 (...)`. Secrets are never echoed.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from vllm_rig.setting_types import allowed_of
from vllm_rig.settings import SECRET_ENV_NAME, SECRET_KEYS, CrossRuleErrors, Settings, catalogue_values
from vllm_rig.stages.lan.certificate import own_certificate_problem
from vllm_rig.stages.service.command import settings_args

# Host data keys that belong to pyinfra, its connectors or our inventory, not to the settings.
FOREIGN_PREFIXES = ("_", "ssh_", "fake_", "local_", "chroot_", "docker_", "podman_", "vagrant_", "terraform_")
INVENTORY_KEYS = frozenset({"profile"})


# pydantic's errors for a mapping setting's entry (setting_types' TypedDicts), in the line's words.
ENTRY_KEY_ERRORS = {"missing": "is missing", "extra_forbidden": "is not a key of this entry"}


class SettingsError(Exception):
    """Bad settings for one host: `lines` holds one message per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def load_settings(data: Mapping[str, Any]) -> Settings:
    """Validate one host's merged data. Raises SettingsError with every problem found."""
    lines = list(unknown_key_lines(data))
    try:
        settings = Settings.model_validate(dict(data))
    except ValidationError as err:
        lines += list(_error_lines(err, data))
        raise SettingsError(lines) from None
    lines += [_line(key, data.get(key), message) for key, message in stage_problems(settings)]
    if not lines:  # the chosen entry's own problems first: one cause, one line
        lines += list(_catalogue_lines(settings, data))
    if lines:
        raise SettingsError(lines)
    return settings


def _catalogue_lines(settings: Settings, data: Mapping[str, Any]) -> Iterable[str]:
    """Every catalogue entry must make valid settings, not only the chosen one: a switch later must not be
    the first to find a bad flag. One line per entry, its first problem."""
    for name in settings.models:
        if name == settings.model:
            continue
        entry_data = {**data, "model": name}
        try:
            entry = Settings.model_validate(entry_data)
        except ValidationError as err:
            first = next(iter(_error_lines(err, entry_data)), "settings: invalid")
            yield f"settings: models[{name!r}] would not be valid settings: {first.removeprefix('settings: ')}"
            continue
        for key, message in stage_problems(entry):
            shown = _line(key, entry_data.get(key), message).removeprefix("settings: ")
            yield f"settings: models[{name!r}] would not be valid settings: {shown}"
            break


def stage_problems(s: Settings) -> Iterable[tuple[str, str]]:
    """(key, message) for the rules that need a stage's own knowledge: the flags the service unit renders, the
    contents of the owner's certificate. Here, above the stages, so the schema below imports none of them."""
    rendered = {arg for arg in settings_args(s, model_path="/m") if arg.startswith("--")}
    clash = rendered & {arg.split("=", 1)[0] for arg in s.vllm_extra_args}
    if clash:
        yield "vllm_extra_args", f"repeats flags the settings already set: {', '.join(sorted(clash))}"
    if s.lan_tls == "own" and s.lan_serving == "proxy" and s.lan_tls_cert_file and s.lan_tls_key_file:
        problem = own_certificate_problem(s.lan_tls_cert_file, s.lan_tls_key_file)
        if problem:
            yield problem


def unknown_key_lines(data: Mapping[str, Any]) -> Iterable[str]:
    """A typo in a setting's name must not fall back silently to the default."""
    known = set(Settings.model_fields)
    for key in sorted(data):
        if key in known or key in INVENTORY_KEYS or key.startswith(FOREIGN_PREFIXES):
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        yield f"settings: {key} is not a setting{hint}; the settings are listed in group_data/all.py"


def _error_lines(err: ValidationError, data: Mapping[str, Any]) -> Iterable[str]:
    chosen = catalogue_values(data)  # values the chosen catalogue entry set are shown, and named as its
    origin = {key: f" (from models[{data.get('model')!r}])" for key in chosen}
    data = {**data, **chosen}
    seen: set[str] = set()
    for error in err.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        if key in seen:  # one line per key: the first problem (a union type: its allowed text)
            continue
        seen.add(key)
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, CrossRuleErrors):
            for key, message in cause.problems:
                yield _line(key, data.get(key), message) + origin.get(key, "")
            continue
        if error["type"] == "missing" and len(error["loc"]) == 1:
            yield f"settings: {key} is missing; add it to group_data/all.py ({_allowed(key)})"
            continue
        union = _is_union(key)  # pydantic refuses a value once per member of a union: none of them is the line
        message = (
            _inside(error["loc"]) + str(cause)
            if isinstance(cause, ValueError) and not union
            else f"must be {_allowed(key)}"
        )
        if error["type"] in ENTRY_KEY_ERRORS and not union:  # a key missing from, or foreign to, an entry
            message = f"{_inside(error['loc'])[:-2]} {ENTRY_KEY_ERRORS[error['type']]}; the setting {message}"
        yield _line(key, data.get(key), message) + origin.get(key, "") + _number_hint(key, data.get(key))


def _is_union(key: str) -> bool:
    """Whether the setting's type is a union of two types or more (X | None is not: pydantic says it once)."""
    field = Settings.model_fields.get(key)
    members = [arg for arg in typing.get_args(field.annotation) if arg is not type(None)] if field else []
    return (
        typing.get_origin(field.annotation if field else None) in (typing.Union, types.UnionType) and len(members) > 1
    )


def _inside(loc: tuple[int | str, ...]) -> str:
    """Where in a mapping or list setting its type refused a value ("entry 'x': "ref": "), "" for the setting."""
    words = [
        f"item {p}" if isinstance(p, int) else f"entry {p!r}" if at == 1 else json.dumps(p) for at, p in enumerate(loc)
    ]
    if loc[-1:] == ("[key]",):  # a mapping's key itself
        words[-2:] = [f"key {loc[-2]!r}"]
    return "".join(f"{word}: " for word in words[1:])


def _number_hint(key: str, value: Any) -> str:
    """A version that arrived as a number lost its text (`--data python_version=3.10` is the float 3.1)."""
    if not isinstance(value, float) or not (key.endswith("_version") or key == "gpu_compute_capability"):
        return ""
    return f"; it arrived as the number {value} (3.10 reads as 3.1): quote it, --data '{key}=\"X.Y\"'"


def _line(key: str, value: Any, message: str) -> str:
    shown = "<hidden>" if key in SECRET_KEYS else _show(value)
    return f"settings: {key}={shown} is not allowed: {message}"


def _show(value: Any) -> str:
    if isinstance(value, dict):  # a secret-looking environment name's value (vllm_env) never reaches the line
        value = {k: "<hidden>" if isinstance(k, str) and SECRET_ENV_NAME.search(k) else v for k, v in value.items()}
    text = repr(value) if isinstance(value, str) else str(value)
    # A URL's user:password never reaches the line, a mapping entry's URL (fetchcontent_sources' repo) included.
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]*@", r"\1<hidden>@", text)
    text = re.sub(r"(--api-key[= ])[^'\",\]\s]+", r"\1<hidden>", text)  # a key in vllm_extra_args
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed(key: str) -> str:
    field = Settings.model_fields.get(key)
    return allowed_of(field) if field is not None else "a valid value"
