"""pyinfra inventory for the sandbox machines (start them with `python -m tests.sandbox up`).

    pyinfra -y inventory/sandbox.py deploy.py

Lists the machines that are running (rig1 if none is); VLLM_RIG_SANDBOX_MACHINES=N lists rig1..rigN.
Only SSH connection data and per-host ports live here; settings come from group_data.
"""

import os
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:  # pyinfra puts the cwd on sys.path; make this work from anywhere
    sys.path.insert(0, _REPO)

from tests.sandbox import machine as _machine  # noqa: E402
from tests.sandbox import paths as _paths  # noqa: E402

_VLLM_PORT_BASE = 8000


def _host(m: _machine.Machine) -> tuple[str, dict]:
    return (
        m.name,
        {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": m.port,
            "ssh_user": "rig",
            "ssh_key": str(_paths.KEYS / _machine.KEY_NAME),  # made by `up`
            "ssh_allow_agent": False,
            "ssh_look_for_keys": False,
            "ssh_known_hosts_file": "/dev/null",
            "ssh_strict_host_key_checking": "no",
            "_sudo": True,
            "vllm_port": _VLLM_PORT_BASE + m.index,
        },
    )


def _selected() -> list[_machine.Machine]:
    if os.environ.get("VLLM_RIG_SANDBOX_MACHINES"):
        return _machine.machines(int(os.environ["VLLM_RIG_SANDBOX_MACHINES"]))
    running = [m for m in _machine.machines(9) if _machine.is_running(m)]
    return running or _machine.machines(1)


_hosts = {m.name: _host(m) for m in _selected()}

# Every sandbox machine; rig2 also stands for a box of the qwen38 profile.
sandbox = list(_hosts.values())
qwen38 = [_hosts[name] for name in ("rig2",) if name in _hosts]
