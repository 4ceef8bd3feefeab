"""bin/deploy: --help and --dry install and start nothing; with a box it is `pyinfra inventory.py deploy.py`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox import __main__ as sandbox_cli
from tests.sandbox import services
from tests.unit.test_first_contact import _stub_bin

REPO = Path(__file__).resolve().parents[2]


def _as_root_stub(tmp_path: Path) -> dict[str, str]:
    """PATH with bash and coreutils, an `id` that says root and an apt-get that records: the worst case."""
    stub = _stub_bin(tmp_path)
    (stub / "id").unlink()
    (stub / "id").write_text("#!/bin/bash\necho 0\n")
    (stub / "id").chmod(0o755)
    return {"PATH": str(stub), "HOME": str(tmp_path)}


def _no_box() -> None:
    if (REPO / "inventory" / "hosts.yml").exists():
        pytest.skip("this checkout has an inventory/hosts.yml")


def test_help_installs_and_starts_nothing(tmp_path: Path) -> None:
    _no_box()
    run = subprocess.run(
        ["bash", "bin/deploy", "--help"], cwd=REPO, env=_as_root_stub(tmp_path), capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.startswith("usage: bin/deploy"), run.stdout + run.stderr
    assert run.stderr == "" and not (tmp_path / "apt.log").exists()


def test_dry_without_a_box_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    _no_box()
    env = {**_as_root_stub(tmp_path), "VLLM_RIG_SANDBOX_ROOT": str(tmp_path / "rig")}  # no rig up, whatever runs here
    run = subprocess.run(["bash", "bin/deploy", "--dry"], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 1 and run.stdout == "" and not (tmp_path / "apt.log").exists()
    assert run.stderr.splitlines() == [
        "deploy: --dry shows the plan for your box or for the simulated rig once it is up: start it with 'sudo "
        "bin/rig sandbox up', or put your box in inventory/hosts.yml (--dry never starts the rig)"
    ]


def test_dry_on_the_simulated_rig_while_it_is_up_shows_the_plan(tmp_path: Path) -> None:
    """The rig counts as up while a machine's supervisor holds its lock: pyinfra runs against inventory/sandbox.py
    with --dry (here it finds no sshd on the machine's port: the point is that it ran)."""
    _no_box()
    import fcntl

    env = {**_as_root_stub(tmp_path), "VLLM_RIG_SANDBOX_ROOT": str(tmp_path / "rig"), "VLLM_RIG_SANDBOX_SLOT": "7"}
    lock = tmp_path / "rig" / "state" / "machine-rig1.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        run = subprocess.run(
            ["bash", "bin/deploy", "--dry"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
    out = run.stdout + run.stderr
    assert "--dry shows the plan for your box" not in out and "needs root" not in out, out
    assert "--> Loading config..." in out and "rig1" in out, out[-2000:]
    assert not (tmp_path / "apt.log").exists()


def test_works_through_a_symlink_from_another_directory(tmp_path: Path) -> None:
    (tmp_path / "rig-deploy").symlink_to(REPO / "bin" / "deploy")
    run = subprocess.run(["./rig-deploy", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("usage: bin/deploy"), run.stderr


def _repo_with_a_box(tmp_path: Path) -> Path:
    """bin/deploy and bin/_venv.sh beside an inventory/hosts.yml, with a .venv whose pyinfra (the wrapper
    vllm_rig/cli/pyinfra_run.py, run by .venv's python) prints its argv."""
    repo = tmp_path / "repo"
    (repo / "bin").mkdir(parents=True)
    for name in ("deploy", "_venv.sh"):
        shutil.copy(REPO / "bin" / name, repo / "bin" / name)
    (repo / "inventory").mkdir()
    (repo / "inventory" / "hosts.yml").write_text("hosts:\n  gpubox: {ssh_hostname: h}\n")
    (repo / "requirements.txt").write_text("")
    (repo / ".venv" / "bin").mkdir(parents=True)
    wrapper = 'if [ "$1 $2" = "-m vllm_rig.cli.pyinfra_run" ]; then shift 2; echo "pyinfra $*"; fi'
    for tool, body in (("python", wrapper), ("pyinfra", 'echo "pyinfra $*"')):
        (repo / ".venv" / "bin" / tool).write_text(f"#!/bin/bash\n{body}\n")
        (repo / ".venv" / "bin" / tool).chmod(0o755)
    return repo


@pytest.mark.parametrize(
    ("args", "pyinfra"),
    [
        ([], "pyinfra inventory.py deploy.py"),
        (["--dry"], "pyinfra inventory.py deploy.py --dry"),
        (["-y", "--limit", "gpubox"], "pyinfra inventory.py deploy.py -y --limit gpubox"),
    ],
)
def test_with_a_box_it_is_pyinfra_with_the_same_arguments(tmp_path: Path, args: list[str], pyinfra: str) -> None:
    """No -y of its own: pyinfra's change detection and Enter prompt stay, --dry shows the plan."""
    repo = _repo_with_a_box(tmp_path)
    run = subprocess.run(["bash", "bin/deploy", *args], cwd=repo, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [pyinfra]


def test_dry_without_y_shows_pyinfras_detected_changes() -> None:
    """What `bin/deploy --dry` hands to pyinfra now: the plan is printed (with -y pyinfra skips detection)."""
    pyinfra = Path(sys.executable).with_name("pyinfra")
    run = subprocess.run(
        [str(pyinfra), "@fake/x", "deploy.py", "--dry"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    out = run.stdout + run.stderr
    assert "--> Detected changes:" in out and "Skipping change detection" not in out, out


def test_a_fixture_port_taken_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        monkeypatch.setattr(sandbox_cli.os, "geteuid", lambda: 0)
        monkeypatch.setattr(sandbox_cli.host_tools, "problem", lambda: None)
        monkeypatch.setattr(sandbox_cli, "up", lambda machines, fresh: services.start("hf_mirror", port))
        assert sandbox_cli.main(["up"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"sandbox: hf_mirror: port {port} is taken by something that is not our fixture: stop it, or move the "
        "simulated rig's ports with VLLM_RIG_SANDBOX_SLOT=1 (2, 3, ...)"
    ]
