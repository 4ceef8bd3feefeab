"""The on-demand jobs behind bin/rig: which log each source reads, what a check says of a login, and what
remove deletes when the model stays (it lives under install_root by default)."""

from __future__ import annotations

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.settings import Settings
from vllm_rig.stages.check.deploy import contact_lines
from vllm_rig.stages.logs.deploy import log_command
from vllm_rig.stages.remove.deploy import Units, in_family, listing_dirs, model_dirs, removal
from vllm_rig.validation import load_settings


def settings_for(**overrides: object) -> Settings:
    return load_settings({**profile_data(), **overrides})


@pytest.mark.parametrize(
    ("source", "follow", "command"),
    [
        ("service", False, "journalctl -u vllm.service -n 50 --no-pager"),
        ("download", True, "journalctl -u vllm-rig-model-fetch.service -n 50 --no-pager -f"),
        ("watchdog", False, "journalctl -u vllm-rig-watchdog.service -n 50 --no-pager"),
    ],
)
def test_each_journal_source_is_its_unit(source: str, follow: bool, command: str) -> None:
    s = settings_for(logs_source=source, logs_follow=follow, logs_lines=50)
    assert log_command(s) == command


def test_the_build_log_is_the_newest_file_followed_by_name() -> None:
    command = log_command(settings_for(logs_source="build", logs_follow=True, logs_lines=7))
    assert "ls -t /var/lib/vllm-rig/logs/build-*.log" in command and 'tail -n 7 -F "$f"' in command
    assert "no runtime build log on this host yet" in command


def test_a_login_without_passwordless_sudo_stops_with_the_way_out() -> None:
    found = {"user": "ubuntu", "uid": 1000, "sudo": "sudo: a password is required", "python": "3.12.3"}
    lines, problems = contact_lines(found, "192.168.1.50")  # type: ignore[arg-type]
    assert lines == [
        "ssh: connected to 192.168.1.50 as ubuntu",
        "sudo: does not work without a password (sudo: a password is required)",
        "python3: 3.12.3",
    ]
    assert len(problems) == 1 and "NOPASSWD" in problems[0] and "--use-sudo-password" in problems[0]


def test_root_without_python_says_so() -> None:
    found = {"user": "root", "uid": 0, "sudo": "sh: 1: sudo: not found", "python": None}
    lines, problems = contact_lines(found, "box")  # type: ignore[arg-type]
    assert lines[1] == "root: yes (no sudo needed)" and lines[2] == "python3: not found"
    assert problems == ["the box has no python3: install it there (sudo apt-get install python3)"]


ROOT = "/opt/vllm-rig"
MODEL = f"{ROOT}/models/Qwen3.6-27B-DSV4Pro-Thinking-FP8"
CANDIDATES = (ROOT, "/var/lib/vllm-rig", "/etc/vllm-rig", "/var/lib/vllm")


def _found(present: tuple[str, ...], listings: dict[str, list[str]], keep: tuple[str, ...]) -> dict[str, list[str]]:
    dirs = listing_dirs(CANDIDATES, keep)
    return {"present": list(present), **{f"dir{i}": listings.get(d, []) for i, d in enumerate(dirs)}}


def test_remove_keeps_the_model_under_install_root_and_deletes_the_rest() -> None:
    keep = (MODEL, "/srv/models/other")
    assert listing_dirs(CANDIDATES, keep) == (ROOT, f"{ROOT}/models")
    found = _found(
        CANDIDATES,
        {ROOT: ["bin", "cache", "current", "models", "previous", "runtimes", "tools"], f"{ROOT}/models": [
            "Qwen3.6-27B-DSV4Pro-Thinking-FP8", "half-done"]},
        keep,
    )  # fmt: skip
    assert removal(CANDIDATES, keep, found) == [
        f"{ROOT}/bin",
        f"{ROOT}/cache",
        f"{ROOT}/current",
        f"{ROOT}/previous",
        f"{ROOT}/runtimes",
        f"{ROOT}/tools",
        f"{ROOT}/models/half-done",
        "/var/lib/vllm-rig",
        "/etc/vllm-rig",
        "/var/lib/vllm",
    ]


def test_remove_with_nothing_left_removes_nothing() -> None:
    keep = (MODEL,)
    found = _found((ROOT,), {ROOT: ["models"], f"{ROOT}/models": ["Qwen3.6-27B-DSV4Pro-Thinking-FP8"]}, keep)
    assert removal(CANDIDATES, keep, found) == []


def test_remove_with_the_model_deletes_install_root_whole() -> None:
    assert removal(CANDIDATES, (), {"present": [ROOT, "/etc/vllm-rig"]}) == [ROOT, "/etc/vllm-rig"]


def test_a_candidate_inside_a_kept_path_is_never_deleted() -> None:
    keep = ("/var/lib",)
    assert removal(CANDIDATES, keep, _found(CANDIDATES, {}, keep)) == [ROOT, "/etc/vllm-rig"]


def test_model_dirs_are_the_settings_and_the_catalogues() -> None:
    s = settings_for()
    dirs = model_dirs(s)
    assert dirs[0] == s.model_dir and len(dirs) == len(set(dirs)) == 1 + len(s.models)


def test_the_models_snapshot_beside_it_is_kept_with_it() -> None:
    """model_dir is a symlink into huggingface_hub's cache beside it (vllm_rig/host/model_fetch.py): both stay,
    and the layout before the cache (DIR.rev-<commit>) too."""
    keep = (MODEL,)
    name = MODEL.rsplit("/", 1)[1]
    beside = [name, "hf-cache", f"{name}.rev-0123456789ab", f".{name}.fetch-status.json", "Other-Model", f"{name}x"]
    found = _found((ROOT,), {ROOT: ["models", "runtimes"], f"{ROOT}/models": beside}, keep)
    assert removal(CANDIDATES, keep, found) == [
        f"{ROOT}/runtimes",
        f"{ROOT}/models/Other-Model",
        f"{ROOT}/models/{name}x",
    ]
    assert in_family(f"{ROOT}/models/{name}.partial-0123", MODEL) and not in_family(f"{ROOT}/{name}.rev-1", MODEL)


def test_the_unit_files_glob_expands_in_the_shell() -> None:
    command = Units().command(patterns=("vllm.service", "vllm-rig-*"))
    assert "ls -1d vllm.service vllm-rig-* " in command  # a quoted '*' would list nothing


def test_units_parse_what_systemctl_and_ls_print() -> None:
    found = Units().process(["@@loaded", "vllm-rig-watchdog.timer", "@@files", "vllm-rig-watchdog.timer", "x.d"])
    assert found == {"loaded": ["vllm-rig-watchdog.timer"], "files": ["vllm-rig-watchdog.timer", "x.d"]}
