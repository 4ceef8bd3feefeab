"""bin/rig: every --help installs and starts nothing; each subcommand maps onto the pyinfra run it stands for;
`init` writes a hosts file the inventory reads, 0600, and refuses what the inventory would refuse."""

from __future__ import annotations

import argparse
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_bin_deploy import _as_root_stub
from vllm_rig.cli import rig
from vllm_rig.inventory_file import load_groups

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [a.dest for a in rig.parser()._subparsers._group_actions[0]._choices_actions]  # type: ignore[union-attr]


def _stub_env(tmp_path: Path) -> dict[str, str]:
    """test_bin_deploy's worst case, with python3 the interpreter itself (a version manager's shim needs more)."""
    env = _as_root_stub(tmp_path)
    python = Path(env["PATH"]) / "python3"
    python.unlink(missing_ok=True)
    python.symlink_to(Path(sys._base_executable).resolve())
    return env


def test_every_subcommand_the_brief_names_is_there() -> None:
    assert COMMANDS == ["init", "check", "deploy", "status", "logs", "switch-model", "releases", "update",
                        "rollback", "bench", "triage", "keys", "remove", "sandbox"]  # fmt: skip


@pytest.mark.parametrize("args", [["--help"], [], *[[c, "--help"] for c in COMMANDS]], ids=lambda a: " ".join(a))
def test_help_installs_and_starts_nothing(tmp_path: Path, args: list[str]) -> None:
    """As root, with only bash, coreutils and python3 on PATH and an apt-get that records: nothing is called."""
    run = subprocess.run(
        ["bash", "bin/rig", *args], cwd=REPO, env=_stub_env(tmp_path), capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0 and run.stdout.startswith("usage: bin/rig"), run.stdout + run.stderr
    assert run.stderr == "" and not (tmp_path / "apt.log").exists()
    if args[:1] and args[0] != "--help":
        assert run.stdout.startswith(f"usage: bin/rig {args[0]}")


def test_works_through_a_symlink_from_another_directory(tmp_path: Path) -> None:
    (tmp_path / "rig").symlink_to(REPO / "bin" / "rig")
    run = subprocess.run(["./rig", "logs", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.startswith("usage: bin/rig logs"), run.stderr


def _plan(argv: list[str], has_box: bool = True) -> list[tuple[str, tuple[str, ...]]]:
    ns, extra = rig.parser().parse_known_args(argv)
    return [(s.setup, s.argv) for s in rig.plan(ns, extra, has_box)]


BOX = "ensure_venv requirements.txt"
SIM = "ensure_venv requirements-dev.txt"
PYI = (".venv/bin/python", "-m", "vllm_rig.cli.pyinfra_run")


@pytest.mark.parametrize(
    ("argv", "has_box", "steps"),
    [
        (["deploy"], True, [("", ("bin/deploy",))]),
        (["deploy", "--dry", "--limit", "gpubox"], True, [("", ("bin/deploy", "--limit", "gpubox", "--dry"))]),
        (["deploy", "-y"], False, [("", ("bin/deploy", "-y"))]),
        (["status", "--json"], True, [("", ("bin/status", "--json"))]),
        (["triage", "--limit", "a"], True, [("", ("bin/triage", "--limit", "a"))]),
        # The address, the port and the login first (vllm_rig/reach.py), then pyinfra's check.
        (["check"], True, [(BOX, (".venv/bin/python", "-m", "vllm_rig.cli.reach", "inventory.py")),
                           ("", (*PYI, "-y", "inventory.py", "tasks/check.py"))]),
        (["check", "--limit", "a"], False, [
            (SIM, (".venv/bin/python", "-m", "vllm_rig.cli.reach", "inventory/sandbox.py", "--limit", "a")),
            ("", (*PYI, "-y", "inventory/sandbox.py", "tasks/check.py", "--limit", "a"))]),
        # A --limit value is never taken for the log's source.
        (["logs", "--limit", "gpubox"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/logs.py", "--limit",
         "gpubox", "--data", "logs_source=service", "--data", "logs_lines=100", "--data", "logs_follow=false"))]),
        (["logs", "build", "-f", "-n", "20"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/logs.py", "--data",
         "logs_source=build", "--data", "logs_lines=20", "--data", "logs_follow=true"))]),
        # Changes: pyinfra's change detection and Enter prompt stay on a box, unless -y.
        (["switch-model", "qwen38"], True, [(BOX, (*PYI, "inventory.py", "tasks/switch_model.py", "--data",
         "model=qwen38"))]),
        (["switch-model", "qwen38", "-y"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/switch_model.py",
         "--data", "model=qwen38"))]),
        (["update", "abc123"], True, [(BOX, (*PYI, "inventory.py", "tasks/update_fork.py", "--data",
         "fork_ref=abc123"))]),
        (["releases"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/fork_releases.py"))]),
        (["rollback", "--limit", "gpubox"], True, [(BOX, (*PYI, "inventory.py", "tasks/rollback.py", "--limit",
         "gpubox"))]),
        (["bench", "--label", "FP16-KV"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/bench.py", "--data",
         "bench_label=FP16-KV"))]),
        (["bench"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/bench.py"))]),
        # Listing keys only reads; adding or revoking one changes the box (the prompt stays).
        (["keys", "list"], True, [(BOX, (*PYI, "-y", "inventory.py", "tasks/keys.py", "--data",
         "keys_action=list"))]),
        (["keys", "add", "laptop", "--limit", "gpubox"], True, [(BOX, (*PYI, "inventory.py", "tasks/keys.py",
         "--limit", "gpubox", "--data", "keys_action=add", "--data", "keys_name=laptop"))]),
        (["keys", "revoke", "chat-page"], False, [(SIM, (*PYI, "-y", "inventory/sandbox.py", "tasks/keys.py",
         "--data", "keys_action=revoke", "--data", "keys_name=chat-page"))]),
        (["remove"], True, [(BOX, (*PYI, "inventory.py", "tasks/remove.py", "--data", "remove_model=false",
         "--data", "remove_driver=false", "--data", "remove_chat_data=false"))]),
        (["remove", "--with-model", "--with-driver", "--data", "x=1", "-vv"], True, [(BOX, (*PYI, "inventory.py",
         "tasks/remove.py", "--data", "x=1", "-vv", "--data", "remove_model=true", "--data", "remove_driver=true",
         "--data", "remove_chat_data=false"))]),
        # The simulated rig is a throwaway: no prompt there.
        (["remove"], False, [(SIM, (*PYI, "-y", "inventory/sandbox.py", "tasks/remove.py", "--data",
         "remove_model=false", "--data", "remove_driver=false", "--data", "remove_chat_data=false"))]),
        # Options this CLI does not know go to pyinfra as they are.
        (["rollback", "--serial"], True, [(BOX, (*PYI, "inventory.py", "tasks/rollback.py", "--serial"))]),
        (["sandbox", "up", "--machines", "2"], True, [("ensure_host_tools rig; " + SIM,
         (".venv/bin/python", "-m", "tests.sandbox", "up", "--machines", "2"))]),
        (["sandbox", "down", "--wipe"], True, [(SIM, (".venv/bin/python", "-m", "tests.sandbox", "down", "--wipe"))]),
        (["sandbox", "deploy", "--limit", "rig1"], True, [
            ("ensure_host_tools rig; " + SIM, (".venv/bin/python", "-m", "tests.sandbox", "up", "--machines", "1")),
            ("", (*PYI, "-y", "inventory/sandbox.py", "deploy.py", "--limit", "rig1")),
        ]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and isinstance(v[0], str) else None,
)  # fmt: skip
def test_each_subcommand_is_its_pyinfra_run(argv: list[str], has_box: bool, steps: list) -> None:
    assert _plan(argv, has_box) == steps


def test_the_tasks_it_runs_exist() -> None:
    for argv in (["check"], ["logs"], ["switch-model", "m"], ["releases"], ["update", "r"], ["rollback"],
                 ["bench"], ["remove"], ["keys", "list"]):  # fmt: skip
        (_, command) = _plan(argv)[-1]
        assert (REPO / command[command.index("inventory.py") + 1]).is_file(), argv


def test_sandbox_without_root_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(rig.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(rig, "run", lambda steps: pytest.fail("ran something"))
    assert rig.main(["sandbox", "up"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "sandbox: the simulated rig needs root (systemd-nspawn): run it with sudo: sudo bin/rig sandbox up"
    ]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["keys", "add"], "keys: add needs a name: bin/rig keys add NAME (e.g. laptop)"),
        (["keys", "revoke", "../x"], "keys: '../x' is not a key name"),
        (["keys", "add", "server"], "keys: 'server' is not a key name"),
        (["keys", "add", "Laptop"], "keys: 'Laptop' is not a key name"),
        (["keys", "list", "laptop"], "keys: list takes no name"),
    ],
)
def test_a_bad_key_command_is_one_line_before_any_box(
    argv: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(rig, "run", lambda steps: pytest.fail("ran something"))
    assert rig.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(line), err


def test_a_bad_log_source_is_argparses_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        rig.main(["logs", "kernel"])
    assert exit_.value.code == 2
    assert "argument source: invalid choice: 'kernel' (choose from" in capsys.readouterr().err


# ---- init


def _init_ns(tmp_path: Path, **given: object) -> argparse.Namespace:
    ns = rig.parser().parse_args(["init", "--file", str(tmp_path / "inventory" / "hosts.yml")])
    for key, value in given.items():
        setattr(ns, key, value)
    return ns


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_text("not a real key\n")
    return path


def test_init_from_flags_writes_what_the_inventory_reads(tmp_path: Path, key: Path, capsys) -> None:
    ns = _init_ns(tmp_path, address="192.168.1.50", user="ubuntu", key=str(key), name="box1")
    assert rig.init(ns, interactive=False) == 0
    path = tmp_path / "inventory" / "hosts.yml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    groups = load_groups(path, REPO / "group_data")
    ((name, data),) = groups["gpu_hosts"][0]
    assert name == "box1"
    assert {k: data[k] for k in ("ssh_hostname", "ssh_user", "ssh_port", "ssh_key", "profile")} == {
        "ssh_hostname": "192.168.1.50",
        "ssh_user": "ubuntu",
        "ssh_port": 22,
        "ssh_key": str(key),
        "profile": "default",
    }
    assert "next: bin/rig check" in capsys.readouterr().out


def test_init_asks_in_a_terminal_with_defaults(tmp_path: Path, key: Path) -> None:
    answers = iter(["", "10.0.0.7", "root", str(key), "2222", "qwen38", "maybe", "yes"])
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    assert rig.init(_init_ns(tmp_path), interactive=True, ask=ask) == 0
    assert asked[0] == "a short name for the box [gpubox]: " and asked[1] == "the box's IP address or DNS name: "
    ((name, data),) = load_groups(tmp_path / "inventory" / "hosts.yml", REPO / "group_data")["gpu_hosts"][0]
    assert (name, data["ssh_port"], data["profile"], data["_sudo"]) == ("gpubox", 2222, "qwen38", False)
    assert asked[-1].startswith("a chat page for the household") and data["chat_page"] is True  # "maybe": again


def test_init_asks_again_for_what_cannot_be_right(tmp_path: Path, key: Path, capsys) -> None:
    answers = iter(["", "192.168.1.500", "192,168,1,50", "ubuntu@10.0.0.7", "10.0.0.7", "", f"{key}.pub",
                    str(key), "", "", ""])  # fmt: skip
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    assert rig.init(_init_ns(tmp_path), interactive=True, ask=ask) == 0
    assert [p.split(" [")[0].rstrip(": ") for p in asked].count("the box's IP address or DNS name") == 4
    assert capsys.readouterr().err.splitlines() == [
        "init: 192.168.1.500 is not an IP address: each of the four numbers is 0 to 255 (500 is not); again:",
        "init: 192,168,1,50 has commas: an IP address is written with dots, like 192.168.1.50; again:",
        "init: ubuntu@10.0.0.7 has a user in it: the address is 10.0.0.7; the user (ubuntu) is given apart, as the "
        "SSH login; again:",
        f"init: {key}.pub is the public key: give the private one ({key}); again:",
    ]
    ((name, data),) = load_groups(tmp_path / "inventory" / "hosts.yml", REPO / "group_data")["gpu_hosts"][0]
    assert (data["ssh_hostname"], data["ssh_key"]) == ("10.0.0.7", str(key))


def test_init_never_replaces_a_file_without_force(tmp_path: Path, key: Path, capsys) -> None:
    path = tmp_path / "inventory" / "hosts.yml"
    path.parent.mkdir()
    path.write_text("mine\n")
    ns = _init_ns(tmp_path, address="h", key=str(key))
    assert rig.init(ns, interactive=False) == 1
    assert path.read_text() == "mine\n"
    assert capsys.readouterr().err.splitlines() == [
        f"init: {path} exists; edit it, or replace it with bin/rig init --force (kept as .bak)"
    ]
    ns.force = True
    assert rig.init(ns, interactive=False) == 0
    assert (tmp_path / "inventory" / "hosts.yml.bak").read_text() == "mine\n"
    assert 'ssh_hostname: "h"' in path.read_text()


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({}, "init: --address is needed (the box's IP address or DNS name); or run bin/rig init in a terminal "
             "to be asked"),
        ({"address": "h", "port": 70000}, "init: --port 70000: a TCP port number, 1 to 65535"),
        ({"address": "h", "name": "my box"}, "init: --name 'my box': allowed are letters, digits, dots, dashes and "
                                             "underscores (up to 63)"),
        ({"address": "a b"}, "init: --address 'a b': must be one word without spaces"),
        ({"address": "192.168.1.500"}, "init: --address: 192.168.1.500 is not an IP address: each of the four "
                                       "numbers is 0 to 255 (500 is not)"),
        ({"address": "192,168,1,50"}, "init: --address: 192,168,1,50 has commas: an IP address is written with "
                                      "dots, like 192.168.1.50"),
        ({"address": "ubuntu@192.168.1.50"}, "init: --address: ubuntu@192.168.1.50 has a user in it: the address "
                                             "is 192.168.1.50; the user (ubuntu) is given apart, as the SSH login"),
        ({"address": "h", "key": "~/.ssh/id_ed25519.pub"}, "init: --key: ~/.ssh/id_ed25519.pub is the public key: "
                                                           "give the private one (~/.ssh/id_ed25519)"),
    ],
)  # fmt: skip
def test_init_bad_values_are_one_line_and_write_nothing(tmp_path: Path, key: Path, capsys, given, line) -> None:
    assert rig.init(_init_ns(tmp_path, **{"key": str(key), **given}), interactive=False) == 1
    assert capsys.readouterr().err.splitlines() == [line]
    assert not (tmp_path / "inventory" / "hosts.yml").exists()


def test_init_refuses_what_the_inventory_refuses_naming_the_file(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-key"
    assert rig.init(_init_ns(tmp_path, address="h", key=str(missing)), interactive=False) == 1
    path = tmp_path / "inventory" / "hosts.yml"
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith("init: not written: ") and "hosts.yml: host gpubox: ssh_key" in err, err
    assert "is no file on this machine" in err and ".hosts.yml.init" not in err
    assert list(path.parent.iterdir()) == []
    assert rig.init(_init_ns(tmp_path, address="h", key=str(missing), profile="nosuch"), interactive=False) == 1
    assert "has profile 'nosuch'; allowed: " in capsys.readouterr().err


def test_the_readme_day_two_table_lists_every_subcommand() -> None:
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Day two with bin/rig", 1)[1].split("\n## ", 1)[0]
    assert [c for c in COMMANDS if f"`bin/rig {c}" not in table] == []
