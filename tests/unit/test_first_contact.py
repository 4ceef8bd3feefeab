"""A new user's first commands: `bin/deploy --dry` fails for a failing preflight, `bin/deploy` without the
sandbox's host tools sets them up or says in one line what it needs, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="@local facts need root (or sudo without a password)")
def test_dry_run_exits_non_zero_when_preflight_fails() -> None:
    """@local here has no GPUs (and no model endpoint): its preflight fails, so --dry must too."""
    exe = Path(sys.executable).with_name("pyinfra")
    run = subprocess.run(
        [str(exe), "-y", "@local", "tasks/preflight.py", "--dry", "--data", "hf_endpoint=https://127.0.0.1:9"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert "preflight verdict for @local: FAIL" in out, out[-2000:]
    assert run.returncode == 1, out[-2000:]
    assert "Traceback" not in out
    # @local as root: group_data's _sudo is switched off for it, so no fact goes through sudo
    assert "sudo: not found" not in out and "could not load fact" not in out


def _stub_bin(tmp_path: Path, installed: str = "") -> Path:
    """A PATH with bash and coreutils only, a dpkg-query that knows `installed`, an apt-get that records."""
    stub = tmp_path / "bin"
    stub.mkdir()
    tools = ("bash", "cat", "grep", "sed", "sha256sum", "cut", "basename", "dirname", "readlink", "id", "python3")
    tools += ("env",)
    for tool in tools:
        found = shutil.which(tool)
        if found:
            (stub / tool).symlink_to(found)
    (stub / "dpkg-query").write_text(
        f'#!/bin/bash\ncase " {installed} " in *" ${{@: -1}} "*) echo \'install ok installed\';; *) exit 1;; esac\n'
    )
    (stub / "apt-get").write_text(f'#!/bin/bash\necho "apt-get $*" >> {tmp_path}/apt.log\n')
    for f in ("dpkg-query", "apt-get"):
        (stub / f).chmod(0o755)
    return stub


def _ensure_host_tools(tmp_path: Path, stub: Path) -> subprocess.CompletedProcess[str]:
    script = "set -euo pipefail; source bin/_venv.sh; ensure_host_tools deploy"
    env = {"PATH": str(stub), "HOME": str(tmp_path)}
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_deploy_installs_the_sandbox_host_tools_that_are_missing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("installs as root (the stub apt-get records instead)")
    run = _ensure_host_tools(tmp_path, _stub_bin(tmp_path, installed="git gnupg"))
    assert run.returncode == 0, run.stderr
    installs = [line for line in (tmp_path / "apt.log").read_text().splitlines() if " install " in line]
    assert installs and "debootstrap" in installs[0] and "systemd-container" in installs[0]
    assert " git " not in installs[0] + " "


def test_deploy_without_apt_says_in_one_line_what_it_needs(tmp_path: Path) -> None:
    stub = _stub_bin(tmp_path)
    (stub / "apt-get").unlink()
    run = _ensure_host_tools(tmp_path, stub)
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0 and "needs a Debian or Ubuntu machine with: " in run.stderr
    assert "debootstrap" in run.stderr and "Traceback" not in run.stderr


def test_sandbox_up_without_its_tools_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.sandbox import host_tools

    monkeypatch.setattr(host_tools, "SBIN", "/nonexistent-sbin")  # a machine with none of them
    line = host_tools.problem(path="/nonexistent")
    assert line is not None and "debootstrap" in line and "systemd-container" in line
    assert "sudo apt-get install" in line
    # a program found on the PATH given counts as there
    assert "git" not in host_tools.missing(path=os.path.dirname(shutil.which("git") or "/nonexistent/git"))


def test_every_tool_package_is_in_the_host_packages_list() -> None:
    from tests.sandbox import host_tools

    listed = {
        line.strip()
        for line in (REPO / "tests/sandbox/host-packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert set(host_tools.PROGRAMS.values()) - {"dpkg"} <= listed


def test_bin_deploy_without_hosts_or_host_tools_says_what_it_needs(tmp_path: Path) -> None:
    """The README's first command on a machine without apt and without the sandbox's tools: one line, rc 1."""
    if (REPO / "inventory" / "hosts.yml").exists():
        pytest.skip("this checkout has an inventory/hosts.yml: bin/deploy would deploy to it")
    stub = _stub_bin(tmp_path)
    (stub / "apt-get").unlink()
    (stub / "id").unlink()
    (stub / "id").write_text("#!/bin/bash\necho 0\n")  # as root, so the host-tools step is reached
    (stub / "id").chmod(0o755)
    env = {"PATH": str(stub), "HOME": str(tmp_path)}
    run = subprocess.run(["bash", "bin/deploy"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 1, run.stderr
    assert lines[-1].startswith("deploy: the simulated rig needs a Debian or Ubuntu machine with: ")
    assert "debootstrap" in lines[-1] and "Traceback" not in run.stderr and len(lines) == 2


def test_bin_deploy_as_a_user_says_the_simulated_rig_needs_root(tmp_path: Path) -> None:
    if (REPO / "inventory" / "hosts.yml").exists():
        pytest.skip("this checkout has an inventory/hosts.yml")
    stub = _stub_bin(tmp_path)
    (stub / "id").unlink()
    (stub / "id").write_text("#!/bin/bash\necho 1000\n")
    (stub / "id").chmod(0o755)
    env = {"PATH": str(stub), "HOME": str(tmp_path)}
    run = subprocess.run(["bash", "bin/deploy"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "needs root" in run.stderr.splitlines()[-1] and "Traceback" not in run.stderr
