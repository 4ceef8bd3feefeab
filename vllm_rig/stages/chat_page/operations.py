"""The chat page's operations: each reads the host with one fact and does only what differs."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.stages.chat_page.facts import ChatEnv, ChatVenv, key_value_script
from vllm_rig.stages.chat_page.layout import ChatDirs
from vllm_rig.stages.lan.facts import Digest

PIP = "PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1"


# Own operation: pip.venv and pip.packages(requirements=...) install on every run, with no build beside the venv
# in use and no switch when complete.
@operation()
def chat_venv(dirs: ChatDirs, python: str, torch_index: str, index_url: str | None):
    """Open WebUI in a venv of its own, built beside the one in use and switched to only when complete: the CPU
    torch of torch-cpu.lock first, alone (pip then keeps it, and no CUDA torch or nvidia-* wheel comes in), then
    Open WebUI's lock, which holds torch's own requirements; both with --require-hashes (every file checked
    against the sha256 this checkout holds); pip check last (what came in fits together)."""
    found = host.get_fact(ChatVenv, stamp=dirs.stamp, key=dirs.key, link=dirs.venv)
    target = f"venvs/{dirs.key}"
    if found["complete"] and found["current"] == target:
        host.noop(f"the chat page's venv is {target}")
        return
    q = shlex.quote
    pip = f"{PIP} {q(dirs.build)}/bin/pip install -q --only-binary :all:"
    if not found["complete"]:
        index = f" --index-url {q(index_url)}" if index_url else ""
        yield (
            f"rm -rf {q(dirs.build)} && {q(python)} -m venv {q(dirs.build)} && "
            f"{pip} --require-hashes --no-deps --index-url {q(torch_index)} -r {q(dirs.torch_lock)} && "
            f"{pip} --require-hashes{index} -r {q(dirs.lock)} && "
            f"{PIP} {q(dirs.build)}/bin/pip check && "
            f"printf '%s\\n' {q(dirs.key)} > {q(dirs.stamp)}"
        )
    link = q(dirs.venv)
    yield f"ln -sfn {q(target)} {link}.new && mv -T {link}.new {link}"
    # ~3 GB each: only this one and the one it replaces (the running page's, until its restart) are kept.
    keep = " | ".join(q(name) for name in sorted({dirs.key, (found["current"] or dirs.key).removeprefix("venvs/")}))
    yield f'cd {q(dirs.root)}/venvs && for d in *; do case "$d" in {keep}) ;; *) rm -rf -- "$d" ;; esac; done'


# Own operation: a secret; files.put would print it with --diff (see core.secrets.secret_file).
@operation()
def chat_env(key_file: str, env_file: str):
    """The page's root-only env file: its own key (OPENAI_API_KEYS, from key_file, which lan_keys made on the box;
    empty once revoked: nginx then refuses the page until bin/rig keys add) and its session secret (made once,
    kept: a new one would sign everyone out)."""
    state = host.get_fact(ChatEnv, key_file=key_file, env_file=env_file)
    if state == "same":
        host.noop(f"{env_file} holds the page's key")
        return
    yield f"sh -c {shlex.quote(env_script(key_file, env_file))}"


def env_script(key_file: str, env_file: str) -> str:
    """Shell that writes the env file whole (a reader sees the old or the new), root-only, the key never on a
    command line; the session secret kept when there is one."""
    f = shlex.quote(env_file)
    return (
        f"set -e; k=$({key_value_script(key_file)}); "
        f's=$(sed -n "s/^WEBUI_SECRET_KEY=//p" {f} 2>/dev/null | head -n1); '
        '[ -n "$s" ] || s=$(python3 -c "import secrets; print(secrets.token_urlsafe(32))"); '
        f"umask 077; mkdir -p $(dirname {f}); tmp=$(mktemp {f}.XXXXXX); "
        'printf "OPENAI_API_KEYS=%s\\nWEBUI_SECRET_KEY=%s\\n" "$k" "$s" > "$tmp"; '
        f'chmod 600 "$tmp"; mv -f "$tmp" {f}'
    )


# Own operation: systemd.service(restarted=True) restarts on this run's changes only and waits for no answer.
@operation()
def chat_started(unit: str, files: tuple[str, ...], stamp: str, port: int, timeout_s: int = 600):
    """The page runs with the unit, env file and venv on disk: (re)started when any changed since it last
    answered, then /health on loopback waited for; a page that does not answer says so with its journal."""
    found = host.get_fact(Digest, paths=files, stamp=stamp, unit=unit)
    if found["active"] and found["digest"] and found["digest"] == found["stamp"]:
        host.noop(f"{unit} runs with the files on disk")
        return
    u = shlex.quote(unit)
    health = f"http://127.0.0.1:{int(port)}/health"
    probe = f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{health}\", timeout=5)' 2>/dev/null"
    script = (
        f"set -e; systemctl daemon-reload; systemctl enable -q {u}; systemctl restart {u}; "
        f"end=$(($(date +%s) + {int(timeout_s)})); "
        f'until {probe}; do if [ "$(date +%s)" -gt "$end" ] || ! systemctl -q is-active {u}; then '
        f'echo "chat page: {unit} does not answer {health}; its journal:" >&2; '
        f"journalctl -u {u} -n 20 --no-pager -o cat >&2; exit 1; fi; sleep 2; done; "
        f"mkdir -p $(dirname {shlex.quote(stamp)}); cat {' '.join(shlex.quote(p) for p in files)} 2>/dev/null "
        f'| sha256sum | cut -d" " -f1 > {shlex.quote(stamp)}'
    )
    yield f"sh -c {shlex.quote(script)}"
