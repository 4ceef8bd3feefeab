"""inventory/hosts.yml: hosts land in their profile's group; mistakes give one line saying what to do."""

from __future__ import annotations

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


def test_example_file_loads() -> None:
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
