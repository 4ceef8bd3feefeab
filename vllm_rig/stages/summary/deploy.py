"""Summary: the run's last operation prints, per host, what each stage changed and how long it took, then
the next step: the URL clients use (the host as this machine reaches it, the LAN port), the model name they
send, how to read the API key, the CA file to trust, and a curl line that works from the repository.

Said when the operation runs (pyinfra runs an operation's body again then, after every operation before it
has finished), so it reports this run; printed after pyinfra's results table where bin/deploy or bin/rig runs
pyinfra (vllm_rig/cli/pyinfra_run.py, core/end_of_run.py); it changes nothing, so a second run still reports no change.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra import host, state
from pyinfra.api import deploy

from vllm_rig import paths
from vllm_rig.core import end_of_run, run_summary
from vllm_rig.core.run import host_failed
from vllm_rig.core.run_summary import StageRun
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings

LOOPBACK = ("127.0.0.1", "::1", "localhost")
SHOWN_CHANGES = 3


def stage_lines(stages: list[StageRun]) -> list[str]:
    lines = []
    for run in stages:
        if not run.changed:
            what = f"no change ({run.operations} operations)"
        else:
            names = ", ".join(run.changed[:SHOWN_CHANGES])
            more = f" and {len(run.changed) - SHOWN_CHANGES} more" if len(run.changed) > SHOWN_CHANGES else ""
            what = f"{len(run.changed)} of {run.operations} operations changed: {names}{more}"
        lines.append(f"{run.stage}: {what}; {run.seconds:.1f} s")
    lines.append(f"this run: {sum(r.seconds for r in stages):.1f} s in {len(stages)} stages")
    return lines


def ssh_command(conn: dict[str, Any]) -> list[str]:
    """ssh to the host as pyinfra reaches it (the inventory's address, user, port, key, host-key settings)."""
    cmd = ["ssh"]
    if conn.get("ssh_key"):
        cmd += ["-i", str(conn["ssh_key"])]
    if conn.get("ssh_port") and int(conn["ssh_port"]) != 22:
        cmd += ["-p", str(conn["ssh_port"])]
    if conn.get("ssh_known_hosts_file"):
        cmd += ["-o", f"UserKnownHostsFile={conn['ssh_known_hosts_file']}"]
    if conn.get("ssh_strict_host_key_checking"):
        cmd += ["-o", f"StrictHostKeyChecking={conn['ssh_strict_host_key_checking']}"]
    address = conn.get("ssh_hostname") or conn["name"]
    cmd.append(f"{conn['ssh_user']}@{address}" if conn.get("ssh_user") else str(address))
    return cmd


def client_url(address: str, s: Settings) -> str:
    """The URL clients use (the OpenAI API's base), for the box at `address`."""
    shown_address = f"[{address}]" if ":" in address else address
    if s.lan_serving == "proxy":
        return f"https://{shown_address}:{s.lan_port}/v1"
    server = shown_address if s.server_host not in LOOPBACK else s.server_host
    return f"http://{server}:{s.vllm_port}/v1"


def next_step_lines(conn: dict[str, Any], s: Settings) -> list[str]:
    """What an owner does next, from the host's connection data and settings; the last line is a curl
    command that works from the repository (where the deploy put the CA file)."""
    name, address = conn["name"], str(conn.get("ssh_hostname") or conn["name"])
    url = client_url(address, s)
    lines = [f'clients use {url} (the OpenAI API) with the model name "{s.served_model_name}"']
    curl = ["curl", "-sS", "--fail-with-body"]
    if s.lan_serving == "proxy" and s.lan_tls == "local_ca":
        ca = f"lan-ca/{name}-ca.crt"
        lines.append(f"clients trust the local CA {ca} (copied here by this run; on the box {paths.LAN_CA_CERT})")
        curl += ["--cacert", ca]
    elif s.lan_serving == "proxy":
        lines.append("clients trust the CA that signed your certificate (lan_tls_cert_file)")
    if s.vllm_api_key == "auto":
        env_file = Layout.of(s).env_file
        sudo = [] if conn.get("ssh_user") == "root" else ["sudo"]
        read = shlex.join([*ssh_command(conn), *sudo, "sed", "-n", "s/^VLLM_API_KEY=//p", env_file])
        lines.append(f"the API key is VLLM_API_KEY in {env_file} on the box (root only); read it: KEY=$({read})")
        curl += ["-H", "Authorization: Bearer $KEY"]
    if s.api_keys and s.lan_serving == "proxy":
        sudo = [] if conn.get("ssh_user") == "root" else ["sudo"]
        read = shlex.join([*ssh_command(conn), *sudo, "cat", f"{paths.KEYS_DIR}/{s.api_keys[0]}"])
        lines.append(
            f"each client's own key ({', '.join(s.api_keys)}) is on the box, root only: {s.api_keys[0]}'s is "
            f"read with {read}; bin/rig keys list shows them all"
        )
    body = {"model": s.served_model_name, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 32}
    curl += ["-H", "Content-Type: application/json", "-d", json.dumps(body), f"{url}/chat/completions"]
    # The key header in double quotes, so the shell expands $KEY; everything else quoted as it is.
    quoted = " ".join('"Authorization: Bearer $KEY"' if a == "Authorization: Bearer $KEY" else shlex.quote(a)
                      for a in curl)  # fmt: skip
    lines.append(f"try it: {quoted}")
    return lines


def connection(h: Any) -> dict[str, Any]:
    keys = ("ssh_hostname", "ssh_user", "ssh_port", "ssh_key", "ssh_known_hosts_file", "ssh_strict_host_key_checking")
    return {"name": h.name, **{k: h.data.get(k) for k in keys}}


@deploy("Summary")
def summarize(s: Settings) -> None:
    if host_failed():
        return
    next_lines = [f"next: {line}" for line in next_step_lines(connection(host), s)]

    def said() -> list[str]:  # when it runs: what this run did and how long each stage took
        return [f"summary: {line}" for line in stage_lines(run_summary.host_stages(state, host))] + next_lines

    end_of_run.lines_said(name="What changed, how long each stage took, and the next step", lines=said)
