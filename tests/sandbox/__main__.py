"""Command line for the sandbox rig.

python -m tests.sandbox up [--machines N] [--fresh]   image, fixtures, machines rig1..rigN, SSH
python -m tests.sandbox down [--wipe]                 machines and fixture servers (--wipe: trees too)
python -m tests.sandbox status
python -m tests.sandbox ssh rig1 [cmd ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tests.sandbox import host_tools, machine, paths, rootfs, services

T = TypeVar("T")


@dataclass
class UpResult:
    machines: list[machine.Machine]
    started: list[str] = field(default_factory=list)  # what this call started or made; empty if all was up
    timings: dict[str, float] = field(default_factory=dict)


def _timed(result: UpResult, step: str, fn: Callable[[], T]) -> T:
    t0 = time.monotonic()
    value = fn()
    result.timings[step] = time.monotonic() - t0
    return value


def up(count: int = 1, fresh: bool = False) -> UpResult:
    """Bring up the image, the fixtures and machines rig1..rigN; leave what already runs alone."""
    ms = machine.machines(count)
    result = UpResult(ms)
    had_image = rootfs.tarball_path().exists()
    _timed(result, "rootfs", rootfs.build)
    if not had_image:
        result.started.append("rootfs image")
    for o in services.up():
        result.timings[f"fixture {o.name}"] = o.seconds
        if o.action == "started":
            result.started.append(f"fixture {o.name}")
        print(f"up: fixture {o.name}: {o.action}" + (f" on 127.0.0.1:{o.port}" if o.port else ""), flush=True)
    machine.key_path()
    for m in ms:
        if fresh and machine.is_running(m):
            machine.down(m)
        if _timed(result, f"{m.name} create", lambda m=m: machine.create(m, fresh=fresh)):
            result.started.append(f"{m.name} tree")
        if _timed(result, f"{m.name} boot", lambda m=m: machine.start(m)):
            result.started.append(f"{m.name} boot")
            print(f"up: {m.name}: booting (ssh on 127.0.0.1:{m.port})", flush=True)
        else:
            print(f"up: {m.name}: already running", flush=True)
    for m in ms:
        _timed(result, f"{m.name} ssh", lambda m=m: machine.wait_ssh(m, timeout=120))
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
    print(f"up: ready ({timings}); started: {', '.join(result.started) or 'nothing'}", flush=True)
    return result


def known_machines() -> list[machine.Machine]:
    """Machines that have a tree or state on disk."""
    names = {p.name for p in (paths.ROOT / "machines").glob("rig*") if p.is_dir() and "." not in p.name}
    names |= {p.name.split(".")[0][len("machine-") :] for p in paths.STATE.glob("machine-*.lock")}
    return [machine.Machine(n) for n in sorted(names, key=lambda n: int(n[3:]))]


def down(wipe: bool = False) -> None:
    for m in known_machines():
        t0 = time.monotonic()
        stopped = machine.down(m)
        what = "powered off" if stopped else "was not running"
        print(f"down: {m.name}: {what} ({time.monotonic() - t0:.1f}s)")
        if wipe:
            machine.destroy(m)
            print(f"down: {m.name}: tree removed")
    for name in services.down():
        print(f"down: fixture {name}: stopped")


def status() -> None:
    for os_name in rootfs.OSES:
        image = rootfs.tarball_path(os_name)
        print(f"image {os_name}: {image} ({'present' if image.exists() else 'not built'})")
    for m in known_machines():
        state = "running" if machine.is_running(m) else "stopped"
        extra = ""
        if state == "running":
            ok = machine.ssh(m, "true", check=False, timeout=10).returncode == 0
            extra = f", boots {machine.boots(m)}, ssh {'ok' if ok else 'not answering'}"
        print(f"machine {m.name}: {state}, ssh 127.0.0.1:{m.port}{extra}")
    for name, state in services.status():
        print(f"fixture {name}: {state}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sandbox", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="build what is missing and start what is not running")
    p_up.add_argument("--machines", type=int, default=1, metavar="N")
    p_up.add_argument("--fresh", action="store_true", help="recreate the machines' trees from the image")
    p_down = sub.add_parser("down", help="power off machines and stop fixture servers")
    p_down.add_argument("--wipe", action="store_true", help="also delete the machines' trees")
    sub.add_parser("status")
    p_ssh = sub.add_parser("ssh", help="ssh into a machine as rig")
    p_ssh.add_argument("name")
    p_ssh.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if os.geteuid() != 0 and args.cmd in ("up", "down"):
        print("the sandbox needs root (debootstrap, systemd-nspawn)", file=sys.stderr)
        return 1
    if args.cmd == "up":
        need = host_tools.problem()
        if need:
            print(f"sandbox: {need}", file=sys.stderr)
            return 1
        try:
            up(args.machines, fresh=args.fresh)
        except services.PortTaken as err:
            print(f"sandbox: {err}", file=sys.stderr)
            return 1
    elif args.cmd == "down":
        down(wipe=args.wipe)
    elif args.cmd == "status":
        status()
    elif args.cmd == "ssh":
        cmd = machine.ssh_command(machine.Machine(args.name), *args.command)
        os.execvp(shutil.which("ssh") or "ssh", cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
