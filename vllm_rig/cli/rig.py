"""bin/rig: one command for an owner's jobs, each a subcommand with its own --help.

Each subcommand is a thin mapping onto what already exists: bin/deploy, bin/status, bin/triage, or
`pyinfra INVENTORY tasks/<job>.py` with the job's settings as `--data`. With inventory/hosts.yml it acts on
your boxes (inventory.py); without one, on the simulated rig (inventory/sandbox.py; `bin/rig sandbox up`).
Options pyinfra knows (--limit, -y, --data, --dry, -v, ...) are handed to it as they are.

`plan()` is the mapping and runs nothing; `main()` parses (so every --help returns before anything is set
up or started), then runs the plan's steps in the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROG = "bin/rig"
REPO = Path(__file__).resolve().parents[2]
HOSTS = "inventory/hosts.yml"
BOX_INVENTORY = "inventory.py"
SANDBOX_INVENTORY = "inventory/sandbox.py"
# pyinfra with Ctrl-C as one line and exit 130, and the summary printed last (vllm_rig/cli/pyinfra_run.py)
PYINFRA = (".venv/bin/python", "-m", "vllm_rig.cli.pyinfra_run")
LOG_SOURCES = ("service", "build", "download", "watchdog")
SANDBOX_ROOT = "the simulated rig needs root (systemd-nspawn): run it with sudo"
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class Step:
    """One command run in the repository: `setup` (bin/_venv.sh functions, e.g. "ensure_venv
    requirements.txt") first, then argv."""

    argv: tuple[str, ...]
    setup: str = ""


def _forwarded(ns: argparse.Namespace) -> list[str]:
    """The pyinfra options this CLI parsed (so that a value is never taken for a subcommand's argument)."""
    out = ["-y"] if ns.yes else []
    for limit in ns.limit or []:
        out += ["--limit", limit]
    for data in ns.data or []:
        out += ["--data", data]
    if ns.verbose:
        out.append("-" + "v" * ns.verbose)
    return out


def _task(task: str, pyinfra_args: Sequence[str], has_box: bool, yes: bool = False) -> Step:
    """`pyinfra INVENTORY TASK ARGS` in .venv: the boxes of inventory/hosts.yml, else the simulated rig,
    which is a throwaway: no prompt there (as bin/deploy). `yes`: the task only reads, so no prompt."""
    args = [a for a in pyinfra_args if a not in ("-y", "--yes")]
    skip_prompt = yes or not has_box or len(args) < len(pyinfra_args)
    inventory, reqs = (BOX_INVENTORY, "requirements.txt") if has_box else (SANDBOX_INVENTORY, "requirements-dev.txt")
    return Step((*PYINFRA, *(["-y"] if skip_prompt else []), inventory, task, *args), f"ensure_venv {reqs}")


def _data(key: str, value: object) -> list[str]:
    shown = value if isinstance(value, str) else json.dumps(value)
    return ["--data", f"{key}={shown}"]


def plan(ns: argparse.Namespace, extra: Sequence[str], has_box: bool) -> list[Step]:
    """The steps a parsed command line runs (nothing runs here). `extra`: options this CLI does not know,
    for pyinfra."""
    fwd = [*_forwarded(ns), *extra]
    cmd = ns.command
    if cmd in ("deploy", "status", "triage"):
        json_flag = ["--json"] if cmd == "status" and ns.json else []
        return [Step((f"bin/{cmd}", *fwd, *json_flag))]
    if cmd == "check":
        # The address, the port and the login first, each failure one line with the next step (vllm_rig/reach.py).
        task = _task("tasks/check.py", fwd, has_box, yes=True)
        inventory = BOX_INVENTORY if has_box else SANDBOX_INVENTORY
        return [Step((".venv/bin/python", "-m", "vllm_rig.cli.reach", inventory, *fwd), task.setup), Step(task.argv)]
    if cmd == "logs":
        data = _data("logs_source", ns.source) + _data("logs_lines", ns.lines) + _data("logs_follow", ns.follow)
        return [_task("tasks/logs.py", [*fwd, *data], has_box, yes=True)]
    if cmd == "switch-model":
        return [_task("tasks/switch_model.py", [*fwd, *_data("model", ns.model)], has_box)]
    if cmd == "releases":
        return [_task("tasks/fork_releases.py", fwd, has_box, yes=True)]
    if cmd == "update":
        return [_task("tasks/update_fork.py", [*fwd, *_data("fork_ref", ns.ref)], has_box)]
    if cmd == "rollback":
        return [_task("tasks/rollback.py", fwd, has_box)]
    if cmd == "bench":
        label = _data("bench_label", ns.label) if ns.label else []
        return [_task("tasks/bench.py", [*fwd, *label], has_box, yes=True)]
    if cmd == "remove":
        data = _data("remove_model", ns.with_model) + _data("remove_driver", ns.with_driver)
        data += _data("remove_chat_data", ns.with_chat_data)
        return [_task("tasks/remove.py", [*fwd, *data], has_box)]
    if cmd == "keys":
        data = _data("keys_action", ns.action) + (_data("keys_name", ns.name) if ns.name else [])
        return [_task("tasks/keys.py", [*fwd, *data], has_box, yes=ns.action == "list")]
    if cmd == "sandbox":
        return _sandbox(ns, fwd)
    raise ValueError(f"no plan for {cmd}")


def _sandbox(ns: argparse.Namespace, fwd: list[str]) -> list[Step]:
    setup = "ensure_host_tools rig; ensure_venv requirements-dev.txt"
    python = (".venv/bin/python", "-m", "tests.sandbox")
    if ns.action == "up":
        return [Step((*python, "up", "--machines", str(ns.machines)), setup)]
    if ns.action == "down":
        return [Step((*python, "down", *(["--wipe"] if ns.wipe else [])), "ensure_venv requirements-dev.txt")]
    yes = [] if "-y" in fwd else ["-y"]
    return [
        Step((*python, "up", "--machines", str(ns.machines)), setup),
        Step((*PYINFRA, *yes, SANDBOX_INVENTORY, "deploy.py", *fwd)),
    ]


# ---- the parser


def _pyinfra_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("pyinfra options (handed to pyinfra; any other pyinfra option works too)")
    g.add_argument("--limit", action="append", metavar="HOST", help="only this host or group (repeatable)")
    g.add_argument("-y", "--yes", action="store_true", help="no change detection, no Enter prompt")
    g.add_argument("--data", action="append", metavar="KEY=VALUE", help="a setting for this run (repeatable)")
    g.add_argument("-v", dest="verbose", action="count", default=0, help="more output (-vv: every command)")
    return p


def _sub(sub, name: str, help_text: str, description: str, parents: list) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help_text,
        description=description,
        parents=parents,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Set up and run the vllm-rig boxes of inventory/hosts.yml (without that file: the simulated "
        "rig). Each command has its own --help; none of them installs or starts anything for --help.",
        epilog="Day one: bin/rig init, bin/rig check, bin/rig deploy. Every command is a pyinfra run of "
        "tasks/*.py; `pyinfra inventory.py deploy.py` is what bin/rig deploy runs.",
        allow_abbrev=False,
    )
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    opts = [_pyinfra_options()]

    p = _sub(sub, "init", "write inventory/hosts.yml for your box", _INIT_DOC, [])
    p.add_argument("--name", help="a short name for the box, used in output (asked; default gpubox)")
    p.add_argument("--address", help="the box's IP address or DNS name (asked when not given)")
    p.add_argument("--user", help="the SSH login, root or a user with passwordless sudo (default ubuntu)")
    p.add_argument("--key", help="the private SSH key on this machine (default ~/.ssh/id_ed25519)")
    p.add_argument("--port", type=int, help="the SSH port (default 22)")
    p.add_argument("--profile", help="default (the reference box's setup) or another group_data/<profile>.py")
    p.add_argument("--chat-page", choices=("yes", "no"), help="a chat page for the household (default no)")
    p.add_argument("--force", action="store_true", help="replace an existing file (kept as hosts.yml.bak)")
    p.add_argument("--file", default=HOSTS, help=argparse.SUPPRESS)

    _sub(sub, "check", "can the deploy reach and use each box? (read-only)", _CHECK_DOC, opts)
    p = _sub(sub, "deploy", "run the whole deploy (= bin/deploy)", _DEPLOY_DOC, opts)
    p = _sub(sub, "status", "what state each box is in now (read-only; = bin/status)", _STATUS_DOC, opts)
    p.add_argument("--json", action="store_true", help="one JSON line per host on stdout")
    p = _sub(sub, "logs", "the service's, the build's, the download's or the watchdog's log", _LOGS_DOC, opts)
    p.add_argument("source", nargs="?", default="service", choices=LOG_SOURCES, help="whose log (default service)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    p.add_argument("-n", "--lines", type=int, default=100, metavar="N", help="lines to show first (default 100)")
    p = _sub(sub, "switch-model", "serve another model of the catalogue", _SWITCH_DOC, opts)
    p.add_argument("model", help="a name in the models setting, or default")
    _sub(sub, "releases", "newer releases of the vLLM fork (read-only)", _RELEASES_DOC, opts)
    p = _sub(sub, "update", "try a newer fork release; switch only if not slower", _UPDATE_DOC, opts)
    p.add_argument("ref", help="the commit `bin/rig releases` printed for the release")
    _sub(sub, "rollback", "put the previous runtime back and restart the service", _ROLLBACK_DOC, opts)
    p = _sub(sub, "bench", "the reference setup's benchmark against the running service", _BENCH_DOC, opts)
    p.add_argument("--label", help="a label stored with the results, e.g. FP8-KV (default: the bench_label setting)")
    _sub(sub, "triage", "a redacted bundle per box for a bug report (= bin/triage)", _TRIAGE_DOC, opts)
    p = _sub(sub, "keys", "the clients' API keys: list, add or revoke one", _KEYS_DOC, opts)
    p.add_argument("action", choices=("list", "add", "revoke"), help="list the keys, or add or revoke NAME")
    p.add_argument("name", nargs="?", help="add, revoke: the key's name, e.g. laptop")
    p = _sub(sub, "remove", "remove what the deploy installed", _REMOVE_DOC, opts)
    p.add_argument("--with-model", action="store_true", help="also delete the downloaded model(s)")
    p.add_argument("--with-driver", action="store_true", help="also remove the NVIDIA driver and CUDA")
    p.add_argument("--with-chat-data", action="store_true", help="also the chat page's accounts and chats")
    p = _sub(sub, "sandbox", "the simulated rig on this machine (needs root)", _SANDBOX_DOC, opts)
    p.add_argument("action", choices=("up", "down", "deploy"), help="start it, stop it, or start it and deploy")
    p.add_argument("--machines", type=int, default=1, metavar="N", help="machines rig1..rigN (up, deploy)")
    p.add_argument("--wipe", action="store_true", help="down: also delete the machines' trees")
    return ap


_INIT_DOC = """Write inventory/hosts.yml for one box, from the options given or, in a terminal, by asking.
The file is checked as every run checks it, written 0600, and never replaced without --force.

  bin/rig init --address 192.168.1.50 --user ubuntu --key ~/.ssh/id_ed25519
  bin/rig init          (asks for each value)

More boxes, ports and per-host settings: edit the file (see inventory/hosts.example.yml)."""
_CHECK_DOC = """Read-only: first tries each box's address, port and SSH login from this machine and, when one fails,
says in one line what to do (is the box on, which port, ssh-copy-id, the private key, bin/rig sandbox up).
Then connects through pyinfra, says whether it is root or has passwordless sudo, which
python3 it has, then runs the preflight (tasks/preflight.py: OS, disk, GPUs, BAR1, Secure Boot, driver,
model source) with its verdict table. Nothing on the box changes."""
_DEPLOY_DOC = """The whole deploy: `pyinfra inventory.py deploy.py OPTIONS` (bin/deploy). pyinfra shows the
detected changes and waits for Enter; -y goes on without both; --dry shows the plan and changes nothing.
Without inventory/hosts.yml: deploys the simulated rig (needs root)."""
_STATUS_DOC = """Read-only: one table per box (service, model, runtime, GPUs, LAN, watchdog), or with --json one
JSON line per box on stdout (tasks/status.py)."""
_LOGS_DOC = """Read-only: the last lines of a log on each box, through pyinfra's SSH (tasks/logs.py):
  service   journalctl -u <service_name>      build     the newest runtime build log
  download  journalctl -u the model download  watchdog  journalctl -u vllm-rig-watchdog
-f keeps printing until Ctrl-C (journalctl -f, tail -F)."""
_SWITCH_DOC = """Serve another entry of the models catalogue (tasks/switch_model.py): its download beside the
running model, the unit, a restart and a real completion. The next deploy goes back to the model setting:
put `model: <name>` in the host's settings to keep it."""
_RELEASES_DOC = """Read-only: which line each box is on (upstream vLLM's release, or the fork's v0.1.x line,
legacy per the fork's README) and what the fork's newer 0.2 line would need (CUDA 13.0, torch 2.13.0+cu130,
GCC 15, kernel >= 7, uv); then the newer releases on the fork's release line (tasks/fork_releases.py), each
with the `bin/rig update <commit>` that tries it."""
_UPDATE_DOC = """A guarded fork update (tasks/update_fork.py): build the release beside the running runtime,
prove it, benchmark both, switch only when decode and prefill are not worse than fork_update_margin_pct;
else the old runtime stays."""
_ROLLBACK_DOC = """Swap the runtime `current` and `previous` on each box and restart the service with the unit
that runtime served with, its runtime kind's flags (the vllm-rig-rollback script the runtime stage installs;
tasks/rollback.py). Running it again rolls forward.
The next deploy does not switch back to the runtime rolled back from."""
_BENCH_DOC = """The reference setup's benchmark against the running service (tasks/bench.py): its table, JSON and a
chart under bench-results/."""
_TRIAGE_DOC = """One archive per box for a bug report, secrets redacted, fetched to triage/ (tasks/triage.py)."""
_KEYS_DOC = """A key for each client of the LAN proxy (tasks/keys.py), made on the box and never shown by a run:
  list         the names, when each was made, its requests since the last read (this or bin/rig status)
  add NAME     make NAME's key on the box; the run says how to read it there (sudo cat /etc/vllm-rig/keys/NAME)
  revoke NAME  delete NAME's key; the next deploy does not make it again even if api_keys names it
Adding or revoking reloads nginx; the server is not restarted and the other keys keep working."""
_REMOVE_DOC = """Remove what the deploy installed (tasks/remove.py): the service, the watchdog timer, the GPU
guard and the other vllm-rig units, the nginx site, the runtimes and tools under install_root, the caches,
the API key and state. nginx and the other distribution packages stay. Running it again changes nothing.
  --with-model   also the model directories (a new deploy downloads them again)
  --with-driver  also the NVIDIA driver, CUDA and their apt sources (a reboot unloads the module)
  --with-chat-data  also the chat page's accounts, chats and database copies (/var/lib/open-webui)"""
_SANDBOX_DOC = """The simulated rig (tests/sandbox), the only place these act: `up` builds what is missing
and starts machines rig1..rigN, `down` stops them, `deploy` starts them and deploys to them
(`pyinfra -y inventory/sandbox.py deploy.py`). Needs root (systemd-nspawn) and installs its host tools."""


# ---- init


def _ask(label: str, default: str | None, ask: Callable[[str], str]) -> str:
    shown = f" [{default}]" if default else ""
    return ask(f"{label}{shown}: ").strip() or (default or "")


def init_answers(
    ns: argparse.Namespace, interactive: bool, ask: Callable[[str], str] = input
) -> dict[str, object] | str:
    """The host entry from the options (asked in a terminal when missing); a str is the one-line problem."""
    values: dict[str, object] = {}
    questions = (
        ("name", "a short name for the box", "gpubox"),
        ("address", "the box's IP address or DNS name", None),
        ("user", "SSH login (root or a user with passwordless sudo)", "ubuntu"),
        ("key", "private SSH key on this machine", "~/.ssh/id_ed25519"),
        ("port", "SSH port", "22"),
        ("profile", "profile (default or a group_data/<profile>.py)", "default"),
        ("chat_page", "a chat page for the household (Open WebUI on port 8445, ~3 GB disk): yes or no", "no"),
    )
    for key, label, default in questions:
        given = getattr(ns, key)
        if given is not None and str(given) != "":
            problem = _init_problem(key, str(given))
            if problem:
                return f"init: --{key}: {problem}"
        while (given is None or given == "") and interactive:
            given = _ask(label, default, ask) or default
            problem = _init_problem(key, str(given)) if given else None
            if problem:
                print(f"init: {problem}; again:", file=sys.stderr)
                given = None
        if given is None or given == "":
            given = default
        if given is None:
            return f"init: --{key} is needed ({label}); or run {PROG} init in a terminal to be asked"
        values[key] = given
    name, address, user = str(values["name"]), str(values["address"]), str(values["user"])
    if not HOST_NAME.match(name):
        return f"init: --name {name!r}: allowed are letters, digits, dots, dashes and underscores (up to 63)"
    for key, text in (("address", address), ("user", user), ("key", str(values["key"]))):
        if not text or any(c.isspace() for c in text):
            return f"init: --{key} {text!r}: must be one word without spaces"
    try:
        port = int(str(values["port"]))
    except ValueError:
        return f"init: --port {values['port']!r}: a TCP port number, 1 to 65535"
    if not 1 <= port <= 65535:
        return f"init: --port {port}: a TCP port number, 1 to 65535"
    values["port"] = port
    return values


def _init_problem(key: str, value: str) -> str | None:
    """What cannot be right in one answer (vllm_rig/reach.py's rules for the address and the key)."""
    from vllm_rig.reach import address_problem, key_problem

    if key == "address":
        return address_problem(value)
    if key == "key":
        return key_problem(value)
    if key == "chat_page" and value not in ("yes", "no"):
        return f"{value!r}: yes or no"
    return None


def hosts_yaml(values: dict[str, object]) -> str:
    """inventory/hosts.yml for one box (strings as JSON, which YAML reads as the same strings)."""
    q = json.dumps
    return (
        f"# Written by {PROG} init. More boxes, ports and per-host settings: inventory/hosts.example.yml.\n"
        "hosts:\n"
        f"  {values['name']}:\n"
        f"    ssh_hostname: {q(values['address'])}\n"
        f"    ssh_user: {q(values['user'])}\n"
        f"    ssh_port: {values['port']}\n"
        f"    ssh_key: {q(values['key'])}\n"
        f"    profile: {q(values['profile'])}\n"
        + ("    settings:\n      chat_page: true\n" if values.get("chat_page") == "yes" else "")
    )


def init(ns: argparse.Namespace, interactive: bool, ask: Callable[[str], str] = input) -> int:
    """Write the hosts file, checked by the inventory's own loader first; 0600; a file there stays unless
    --force. Runs in .venv (the loader needs PyYAML and pydantic)."""
    from vllm_rig.inventory_file import InventoryError, load_groups

    path = Path(ns.file)
    if path.exists() and not ns.force:
        return _fail(f"init: {ns.file} exists; edit it, or replace it with {PROG} init --force (kept as .bak)")
    values = init_answers(ns, interactive, ask)
    if isinstance(values, str):
        return _fail(values)
    text = hosts_yaml(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.init")
    _write_private(draft, text)
    try:
        load_groups(draft, REPO / "group_data")
    except InventoryError as err:
        draft.unlink()
        return _fail(f"init: not written: {str(err).replace(draft.name, path.name)}")
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(draft, path)
    print(f"init: wrote {ns.file} (mode 600) for {values['name']} at {values['user']}@{values['address']}")
    print(f"init: next: {PROG} check   (read-only: SSH, sudo, Python, then the preflight)")
    return 0


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    path.chmod(0o600)


def _fail(line: str) -> int:
    print(line, file=sys.stderr)
    return 1


# ---- keys


KEY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")  # setting_types.KEY_NAME (this file runs before the venv exists)


def keys_problem(ns: argparse.Namespace) -> str | None:
    """One line when the command line cannot be right, before any box is touched."""
    if ns.action == "list":
        return f"keys: list takes no name (got {ns.name!r})" if ns.name else None
    if not ns.name:
        return f"keys: {ns.action} needs a name: {PROG} keys {ns.action} NAME (e.g. laptop)"
    if not KEY_NAME.match(ns.name) or ns.name == "server":
        return (
            f"keys: {ns.name!r} is not a key name: a short lowercase word (a-z first, then a-z, 0-9 or -, up to 32), "
            'not "server"'
        )
    return None


# ---- running


def _venv_python_ready() -> bool:
    try:
        import pydantic  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        return False
    return True


def run(steps: list[Step]) -> int:
    """Each step in the repository, through bash with bin/_venv.sh sourced; the first that fails ends it."""
    for step in steps:
        script = f'set -euo pipefail; source bin/_venv.sh; {step.setup + ";" if step.setup else ""} exec "$@"'
        # Ctrl-C reaches the step too (the terminal's process group): it says what goes on and exits 130;
        # here it only ends the waiting, without a traceback. A handler, not SIG_IGN, which a child would inherit.
        previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
        try:
            rc = subprocess.run(["bash", "-c", script, PROG, *step.argv], cwd=REPO).returncode
        finally:
            signal.signal(signal.SIGINT, previous)
        if rc in (130, -signal.SIGINT):
            return 130
        if rc != 0:
            return rc
    return 0


def main(argv: list[str]) -> int:
    ap = parser()
    ns, extra = ap.parse_known_args(argv)
    if ns.command is None:
        ap.print_help()
        return 0
    if ns.command == "init":
        if extra:
            ap.parse_args(argv)  # argparse's own one line for an unknown option
        if not _venv_python_ready():
            if os.environ.get("VLLM_RIG_CLI_VENV"):
                return _fail("init: .venv has no PyYAML or pydantic: rm -rf .venv and run it again")
            rc = subprocess.run(["bash", "-c", "source bin/_venv.sh && ensure_venv requirements.txt"], cwd=REPO)
            if rc.returncode != 0:
                return rc.returncode
            os.environ["VLLM_RIG_CLI_VENV"] = "1"
            os.chdir(REPO)
            os.execv(str(REPO / ".venv/bin/python"), [".venv/bin/python", "-m", "vllm_rig.cli", *argv])
        os.chdir(REPO)
        return init(ns, interactive=sys.stdin.isatty())
    if ns.command == "keys":
        problem = keys_problem(ns)
        if problem:
            return _fail(problem)
    if ns.command == "sandbox" and os.geteuid() != 0:
        return _fail(f"sandbox: {SANDBOX_ROOT}: sudo {PROG} sandbox {ns.action}")
    return run(plan(ns, extra, has_box=(REPO / HOSTS).exists()))
