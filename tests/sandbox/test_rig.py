"""The rig itself: machines boot, take SSH and sudo, survive an inside reboot; the file server (nginx) does ranges."""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.sandbox import machine, paths, rootfs, services

# --- no rig needed --------------------------------------------------------------------------------


def test_fingerprint_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    before = rootfs.fingerprint()
    assert rootfs.fingerprint() == before
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "htop"))
    assert rootfs.fingerprint() != before


def test_the_ubuntu_image_is_the_bookworm_one_plus_noble_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    debian, ubuntu = rootfs.fingerprint(rootfs.DEBIAN12), rootfs.fingerprint(rootfs.UBUNTU2404)
    assert debian != ubuntu and rootfs.tarball_path(rootfs.UBUNTU2404).name.startswith("rootfs-noble-on-bookworm-")
    monkeypatch.setattr(rootfs, "_NOBLE_IDENTITY", rootfs._NOBLE_IDENTITY + "true\n")
    assert (rootfs.fingerprint(rootfs.DEBIAN12), rootfs.fingerprint(rootfs.UBUNTU2404) != ubuntu) == (debian, True)
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "htop"))  # a new base makes a new noble image
    assert rootfs.fingerprint(rootfs.DEBIAN12) != debian and rootfs.fingerprint(rootfs.UBUNTU2404) != ubuntu
    with pytest.raises(ValueError):
        rootfs.fingerprint("ubuntu2204")


def test_only_rig3_is_the_ubuntu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [m.os for m in machine.machines(4)] == ["debian12", "debian12", "ubuntu2404", "debian12"]
    monkeypatch.setenv("VLLM_RIG_SANDBOX_MACHINES", "3")
    hosts = dict(runpy.run_path(str(paths.REPO / "inventory" / "sandbox.py"))["sandbox"][0])
    assert hosts["rig3"]["python_version"] == "3.11"  # bookworm's python under the noble name
    assert "python_version" not in hosts["rig1"] and "python_version" not in hosts["rig2"]


def test_machine_names_and_ports() -> None:
    base = paths.SSH_PORT_BASE
    assert [(m.name, m.port) for m in machine.machines(2)] == [("rig1", base + 1), ("rig2", base + 2)]
    with pytest.raises(ValueError):
        machine.Machine("box1")


def test_missing_fixture_module_is_skipped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(services, "FIXTURES", ["no_such_fixture"])
    outcomes = services.up()
    assert [(o.name, o.action) for o in outcomes] == [("no_such_fixture", "missing")]
    assert "skipped" in capsys.readouterr().out


def test_inventory_groups_and_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_RIG_SANDBOX_MACHINES", "2")
    inv = runpy.run_path(str(paths.REPO / "inventory" / "sandbox.py"))
    hosts, group_settings = inv["sandbox"]
    assert [name for name, _ in hosts] == ["rig1", "rig2"]
    assert [name for name, _ in inv["qwen38"]] == ["rig2"]
    # Only sources and what a Debian 12 container is differ from the real defaults.
    assert group_settings["hf_endpoint"] == f"http://127.0.0.1:{paths.HF_MIRROR_PORT}"
    assert group_settings["fork_repo"].startswith(f"http://127.0.0.1:{paths.FILESERVER_PORT}/git/")
    rig2 = dict(hosts)["rig2"]
    assert (rig2["ssh_hostname"], rig2["ssh_port"], rig2["ssh_user"], rig2["vllm_port"]) == (
        "127.0.0.1",
        paths.SSH_PORT_BASE + 2,
        "rig",
        paths.VLLM_PORT_BASE + 2,
    )
    assert rig2["ssh_key"] == str(paths.KEYS / machine.KEY_NAME)


# --- on the running rig ---------------------------------------------------------------------------


def test_ssh_as_rig_and_sudo(rig: Rig) -> None:
    assert rig.ssh("rig1", "id -un").strip() == "rig"
    assert rig.ssh("rig1", "sudo -n id -u").strip() == "0"
    assert rig.ssh("rig1", "hostname").strip() == "rig1"


def test_machine_is_a_clean_booted_system(rig: Rig) -> None:
    # In a lane the machine may come from an earlier module whose deploy left a failed build unit on purpose
    # (a failing compile); those are the rig's, not the image's: what this checks is the image.
    rig.ssh("rig1", "sudo systemctl reset-failed 'vllm-rig-*'", check=False)
    state = rig.ssh("rig1", "systemctl is-system-running --wait", check=False).strip()
    failed = rig.ssh("rig1", "systemctl --failed --no-legend --plain", check=False)
    assert state == "running", failed
    timers = rig.ssh("rig1", "systemctl is-enabled apt-daily.timer apt-daily-upgrade.timer", check=False)
    assert timers.split() == ["masked", "masked"]
    # The host's kernel, seen from inside: a container, not a VM.
    assert rig.ssh("rig1", "uname -r").strip() == os.uname().release


def test_sshd_is_loopback_only_and_keys_only(rig: Rig) -> None:
    m = rig.machine("rig1")
    cfg = rig.ssh("rig1", "sudo -n sshd -T").splitlines()
    assert f"port {m.port}" in cfg
    assert "passwordauthentication no" in cfg
    assert [line for line in cfg if line.startswith("listenaddress")] == [f"listenaddress 127.0.0.1:{m.port}"]


def test_pyinfra_exec_over_ssh(rig: Rig) -> None:
    proc = rig.pyinfra("exec", "--", "uname", "-a")
    out = proc.stdout + proc.stderr  # pyinfra logs to stderr
    assert proc.returncode == 0, out
    assert "[rig1] Linux rig1 " in out
    proc = rig.pyinfra("exec", "--", "whoami")  # _sudo=True comes from the inventory's host data
    assert proc.returncode == 0
    assert "[rig1] root" in proc.stdout + proc.stderr


def test_fileserver_serves_ranges(rig: Rig) -> None:
    blob = os.urandom(10_000)
    path = paths.WWW / "rig-test" / "blob.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    url = rig.fileserver + "rig-test/blob.bin"

    req = urllib.request.Request(url, headers={"Range": "bytes=1000-1999"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 206
        assert resp.headers["Content-Range"] == f"bytes 1000-1999/{len(blob)}"
        assert resp.headers["Content-Length"] == "1000"
        assert resp.read() == blob[1000:2000]
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(blob))
        assert resp.read() == b""
    # The machine shares the host's network: it reaches the file server on 127.0.0.1 too.
    tail = rig.ssh("rig1", f"curl -fsS -r -16 {url} | od -An -tx1 | tr -d ' \\n'")
    assert tail == blob[-16:].hex()


def test_up_twice_starts_nothing(rig: Rig) -> None:
    from tests.sandbox.__main__ import up

    pids = {m.name: machine.supervisor_pid(m) for m in rig.machines}
    result = up(len(rig.machines))
    assert result.started == []
    assert {m.name: machine.supervisor_pid(m) for m in rig.machines} == pids


def _wait_new_boot(m: machine.Machine, old: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            new = machine.ssh(m, "cat /proc/sys/kernel/random/boot_id", check=False, timeout=10).stdout
            new = new.strip()
        except subprocess.TimeoutExpired:
            new = ""
        if new and new != old:
            return new
        time.sleep(0.3)
    raise TimeoutError(f"{m.name} did not come back with a new boot_id within {timeout}s")


def test_inside_reboot_comes_back_with_new_boot_id(rig: Rig) -> None:
    m = rig.machine("rig1")
    before, boots = machine.boot_id(m), machine.boots(m)
    assert before != Path("/proc/sys/kernel/random/boot_id").read_text().strip()  # not the host's
    marker = "/var/tmp/rig-survives-reboot"
    rig.ssh("rig1", f"sudo -n touch {marker}")
    t0 = time.monotonic()
    machine.ssh(m, "sudo -n systemctl reboot", check=False)  # the connection may drop: fine
    after = _wait_new_boot(m, before, timeout=90)
    print(f"reboot round trip: {time.monotonic() - t0:.1f}s")
    assert machine.boots(m) == boots + 1  # the supervisor booted it again after exit 133
    # Same disk; SSH and sudo work.
    assert rig.ssh("rig1", f"test -e {marker} && sudo -n id -u").strip() == "0"
    assert after != before


@pytest.fixture(scope="module")
def spare(rig: Rig) -> Iterator[machine.Machine]:
    """A machine of its own (rig9) for tests that stop or break it, so the session's machines stay up."""
    m = machine.Machine("rig9")
    machine.create(m, fresh=True)
    try:
        yield m
    finally:
        machine.destroy(m)


def _booted(m: machine.Machine) -> None:
    machine.start(m)
    machine.wait_ssh(m, timeout=60)


def test_units_are_isolated_between_machines(rig: Rig, spare: machine.Machine) -> None:
    # Each machine has its own host cgroup: stopping a unit in one must not kill its namesake in another.
    _booted(spare)
    probe = "sudo -n systemd-run --quiet --unit=rig-probe sleep 600"
    for m in (rig.machine("rig1"), spare):
        machine.ssh(m, "sudo -n systemctl stop rig-probe 2>/dev/null; " + probe)
    machine.ssh(spare, "sudo -n systemctl stop rig-probe")
    try:
        assert rig.ssh("rig1", "systemctl is-active rig-probe", check=False).strip() == "active"
    finally:
        rig.ssh("rig1", "sudo -n systemctl stop rig-probe", check=False)


def test_down_is_clean_and_idempotent(spare: machine.Machine) -> None:
    m = spare
    _booted(m)
    assert machine.start(m) is False
    nspawn = machine.nspawn_pid(m)
    log_size = m.state("console.log").stat().st_size
    t0 = time.monotonic()
    assert machine.down(m) is True
    print(f"down: {time.monotonic() - t0:.1f}s")
    with m.state("console.log").open("rb") as log:
        log.seek(log_size)
        assert b"Powering off" in log.read()  # an orderly poweroff, not a kill
    assert not machine.is_running(m)
    assert nspawn is not None
    assert not machine.pid_alive(nspawn)
    assert machine._machine_pids(m) == set()
    assert machine.down(m) is False


def _inits_of(m: machine.Machine) -> int:
    """How many host processes are a container init (systemd) of this machine."""
    scope = f"/{paths.host_wide_name(m.name)}/payload/init.scope"
    count = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if not machine.pid_alive(int(proc.name)):  # a killed init may linger a moment as a zombie
                continue
            if (proc / "comm").read_text().strip() == "systemd" and scope in (proc / "cgroup").read_text():
                count += 1
        except OSError:
            continue
    return count


def test_killed_supervisor_leaves_nothing_running(spare: machine.Machine) -> None:
    m = spare
    _booted(m)
    for pid in (machine.supervisor_pid(m), machine.nspawn_pid(m)):
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert not machine.is_running(m)
    assert machine._machine_pids(m), "the container's init outlives nspawn: the case start() must clean up"
    _booted(m)  # kills the leftovers, then boots: never two containers on one tree
    assert _inits_of(m) == 1
    assert machine.down(m, timeout=0.01) is True  # too short to power off: the plug gets pulled
    assert machine._machine_pids(m) == set()
