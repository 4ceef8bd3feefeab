"""inventory/hosts.yml: hosts land in their profile's group; mistakes give one line saying what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_rig.inventory_file import InventoryError, load_groups

REPO = Path(__file__).resolve().parents[2]
GROUP_DATA = REPO / "group_data"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    return path


def test_example_file_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the example's ssh_key, ~/.ssh/id_ed25519, must exist
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("a key\n")
    groups = load_groups(REPO / "inventory" / "hosts.example.yml", GROUP_DATA)
    hosts, _ = groups["gpu_hosts"]
    name, data = hosts[0]
    assert name == "gpubox"
    assert data["ssh_hostname"] == "192.168.1.50" and data["gpu_power_limit_w"] == 250
    assert data["ssh_key"].endswith("/.ssh/id_ed25519") and not data["ssh_key"].startswith("~")


def test_root_login_runs_without_sudo(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts:\n  a: {ssh_hostname: h1, ssh_user: root}\n  b: {ssh_hostname: h2, ssh_user: me}\n")
    (_, a), (_, b) = load_groups(path, GROUP_DATA)["gpu_hosts"][0]
    assert a["_sudo"] is False and "_sudo" not in b


def test_profile_becomes_a_group(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts:\n  a: {ssh_hostname: h1}\n  b: {ssh_hostname: h2, profile: qwen38}\n")
    groups = load_groups(path, GROUP_DATA)
    assert [h[0] for h in groups["gpu_hosts"][0]] == ["a", "b"]
    assert [h[0] for h in groups["qwen38"][0]] == ["b"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hosts: [", "is not valid YAML at line"),
        ("hosts: {}\n", "must have a 'hosts:' mapping"),
        ("hosts:\n  a: just-a-string\n", "host a must be a mapping"),
        ("hosts:\n  a: {ssh_hostname: h, max_model_len: 5}\n", "unknown key max_model_len"),
        (
            "hosts:\n  a: {ssh_hostname: h, profile: qwen99}\n",
            "profile 'qwen99'; allowed: default, fork_validated, qwen38",
        ),
        ("hosts:\n  a: {ssh_hostname: h, settings: [1]}\n", "'settings' must be a mapping"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(InventoryError) as err:
        load_groups(_write(tmp_path, text), GROUP_DATA)
    assert expected in str(err.value) and "\n" not in str(err.value)


# Mistakes the data alone would hide, each with its whole line ({f} is the file as the message names it).
EXACT = [
    pytest.param(
        "hosts:\n  gpubox:\n    ssh_hostname: a\n  gpubox:\n    ssh_hostname: b\n",
        "{f}: host gpubox is listed twice (lines 2 and 4); YAML would keep only the second and drop the first "
        "box silently: give each box its own name",
        id="duplicate-host",
    ),
    pytest.param(
        "hosts:\n  a:\n    ssh_hostname: h\n    settings:\n      max_model_len: 5\n      max_model_len: 6\n",
        "{f}: host a: settings: max_model_len is given twice (lines 5 and 6); keep one",
        id="duplicate-setting",
    ),
    pytest.param(
        "max_model_len: 5\nhosts:\n  a: {ssh_hostname: h}\n",
        "{f}: max_model_len at the top level is not read: put it under hosts: <host>: settings: "
        "(or in group_data/all.py for every box)",
        id="setting-at-top-level",
    ),
    pytest.param(
        "all:\n  hosts:\n    a: {ssh_hostname: h}\n",
        "{f}: 'all:' is Ansible's layout, which this file does not read: list each box under 'hosts:' "
        "(see inventory/hosts.example.yml); a setting for every box goes in group_data/all.py",
        id="ansible-all-block",
    ),
    pytest.param(
        "vars: {a: 1}\nhosts:\n  a: {ssh_hostname: h}\n",
        "{f}: top-level key vars is not read; the file has one key, 'hosts:' (see inventory/hosts.example.yml)",
        id="other-top-level-key",
    ),
    pytest.param(
        "hosts:\n  a:\n    ssh_hostname: h\n    settings:\n      profile: qwen38\n",
        "{f}: host a: profile is under 'settings:', where it is not read; move it up one level, beside ssh_hostname",
        id="profile-under-settings",
    ),
    pytest.param(
        "hosts:\n  a:\n    ssh_hostname: h\n    settings:\n      python_version: 3.10\n",
        '{f}: host a: python_version: 3.10 is read by YAML as the number 3.1; quote it: python_version: "3.10"',
        id="version-as-float",
    ),
    pytest.param(
        "hosts:\n  a:\n    ssh_hostname: h\n    settings: {cuda_version: 12.9}\n",
        '{f}: host a: cuda_version: 12.9 is read by YAML as the number 12.9; quote it: cuda_version: "12.9"',
        id="version-as-float-flow",
    ),
    pytest.param(
        "hosts:\n  a:\n    ssh_hostname: h\n    ssh_key: ~/.ssh/nope_ed25519\n",
        "{f}: host a: ssh_key ~/.ssh/nope_ed25519 is no file on this machine; point ssh_key at your private key "
        "or make one: ssh-keygen -t ed25519 -f ~/.ssh/nope_ed25519",
        id="missing-ssh-key",
    ),
]


@pytest.mark.parametrize(("text", "line"), EXACT)
def test_hidden_mistakes_are_one_exact_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = _write(tmp_path, text)
    with pytest.raises(InventoryError) as err:
        load_groups(path, GROUP_DATA)
    assert str(err.value) == line.format(f=Path(os.path.relpath(path)))


def test_quoted_versions_and_an_existing_key_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "key").write_text("a key\n")
    path = _write(
        tmp_path,
        "hosts:\n  a:\n    ssh_hostname: h\n    ssh_key: ~/key\n"
        '    settings: {python_version: "3.10", max_model_len: 5}\n',
    )
    (_, data), *_ = load_groups(path, GROUP_DATA)["gpu_hosts"][0]
    assert data["python_version"] == "3.10" and data["ssh_key"] == str(tmp_path / "key")


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="copy inventory/hosts.example.yml"):
        load_groups(tmp_path / "hosts.yml", GROUP_DATA)


def test_cli_without_hosts_file_prints_one_line(tmp_path: Path) -> None:
    if (REPO / "inventory" / "hosts.yml").exists():
        pytest.skip("a real inventory/hosts.yml is present")
    pyinfra = Path(sys.executable).with_name("pyinfra")
    run = subprocess.run(
        [str(pyinfra), "inventory.py", "debug-inventory"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    assert "inventory: inventory/hosts.yml does not exist: copy inventory/hosts.example.yml" in run.stderr


def _inventory_copy(tmp_path: Path, hosts_yml: str) -> Path:
    """The real inventory.py beside a hosts.yml of the test's own: inventory.py reads the one next to it."""
    shutil.copy(REPO / "inventory.py", tmp_path / "inventory.py")
    (tmp_path / "group_data").symlink_to(GROUP_DATA)
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text(hosts_yml)
    return tmp_path / "inventory.py"


def _pyinfra(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    pyinfra = Path(sys.executable).with_name("pyinfra")
    return subprocess.run([str(pyinfra), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_limit_that_matches_no_host_fails_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("a key\n")
    inventory = _inventory_copy(tmp_path, f"hosts:\n  gpubox: {{ssh_hostname: h, ssh_key: {tmp_path}/key}}\n")
    run = _pyinfra(str(inventory), "debug-inventory", "--limit", "nosuchhost")
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr.splitlines()[-1] == "--limit nosuchhost matches no host or group; the hosts are: gpubox"
    assert "Traceback" not in run.stderr and "No host matches" not in run.stderr
    # the same host by name, by glob and by its group still match: the check asks each --limit on its own
    # (one run for the three: each pyinfra start is about 2 s)
    run = _pyinfra(str(inventory), "debug-inventory", "--limit", "gpubox", "--limit", "gpu*", "--limit", "gpu_hosts")
    assert run.returncode == 0, run.stdout + run.stderr


def test_cli_missing_ssh_key_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    inventory = _inventory_copy(tmp_path, f"hosts:\n  gpubox: {{ssh_hostname: h, ssh_key: {tmp_path}/none}}\n")
    run = _pyinfra(str(inventory), "debug-inventory")
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith("inventory: ") and f"ssh_key {tmp_path}/none is no file" in run.stderr


def test_inventory_imports_from_another_directory(tmp_path: Path) -> None:
    """pyinfra puts only the cwd on sys.path; inventory.py finds vllm_rig next to itself."""
    if (REPO / "inventory" / "hosts.yml").exists():
        pytest.skip("a real inventory/hosts.yml is present")
    run = _pyinfra(str(REPO / "inventory.py"), "debug-inventory", cwd=tmp_path)
    assert "ModuleNotFoundError" not in run.stderr and "hosts.yml does not exist" in run.stderr, run.stderr
