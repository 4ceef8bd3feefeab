"""The front's copy of each box's CA and key: compared by digest while planning, read from the box over the
deploy's own SSH connection only when they differ, at execution time (a box's first run makes them in the same
run, before this stage), and written root-only on the front from stdin: never on a command line or in output."""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, StringCommand, operation

from vllm_rig.core.become import decide, sudo_args
from vllm_rig.core.checks import fail_host
from vllm_rig.core.secrets import PrivateFile, private_write
from vllm_rig.stages.front.facts import BEARER_TOKEN, BoxFiles, key_line, read_key

NOT_BEARER = "its API key holds characters a Bearer token may not (RFC 6750: letters, digits, - . _ ~ + / then =)"


# Own operation: a secret; files.put would print it with --diff (see core.secrets.secret_file).
@operation()
def box_files(box: str, env_file: str, ca_file: str, ca_dest: str, key_dest: str):
    """`ca_dest` holds box's CA certificate and `key_dest` the nginx line that sends box's key, both 0600 root."""
    other = state.inventory.get_host(box)
    decide(other)  # its sudo setting, as its own operations use it
    theirs = other.get_fact(BoxFiles, env_file=env_file, ca_file=ca_file)
    if theirs["key"] and not theirs["key_ok"]:
        yield FunctionCommand(fail_host, (f"front: {box}: {NOT_BEARER}; make a new one there",), {})
        return
    ours = {dest: host.get_fact(PrivateFile, path=dest) for dest in (ca_dest, key_dest)}
    want = {ca_dest: theirs["ca"], key_dest: theirs["key"]}
    if all(want[d] and ours[d] == {"mode": "600", "owner": "root:root", "sha256": want[d]} for d in want):
        host.noop(f"{box}'s CA and key are in place")
        return
    yield FunctionCommand(_copy, (box, env_file, ca_file, ca_dest, key_dest), {})


def _copy(state, host, box: str, env_file: str, ca_file: str, ca_dest: str, key_dest: str) -> bool:  # noqa: ARG001
    other = state.inventory.get_host(box)
    if not other.connected:
        other.connect(reason=f"to read its CA and key for the front on {host.name}", raise_exceptions=False)
    sudo = sudo_args(other)
    ok_ca, ca = other.run_shell_command(StringCommand("cat", ca_file), **sudo)
    ok_key, key = other.run_shell_command(StringCommand(read_key(env_file)), **sudo)
    ca_text, key_text = "\n".join(ca.stdout_lines) + "\n", key.stdout.strip()
    if not (ok_ca and ok_key) or "BEGIN CERTIFICATE" not in ca_text or not key_text:
        logger.error(f"[{host.name}] front: could not read {box}'s CA certificate and API key (is {box} deployed?)")
        return False
    if not BEARER_TOKEN.match(key_text):
        logger.error(f"[{host.name}] front: {box}: {NOT_BEARER}; make a new one there")
        return False
    for dest, text in ((ca_dest, ca_text), (key_dest, key_line(key_text))):
        command = private_write(dest, text)  # its stdin holds the text; it prints as <stdin>
        written, _ = host.run_shell_command(command, _stdin=command.connector_arguments["_stdin"], **sudo_args(host))
        if not written:
            logger.error(f"[{host.name}] front: could not write {dest}")
            return False
    return True
