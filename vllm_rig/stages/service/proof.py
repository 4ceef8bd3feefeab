"""Prove a service answers after it changed, once per change.

A stamp records what was proven (a fingerprint of what must hold, e.g. the unit and the driver, and the
runtime `current` points at). A no-op
re-run reads the stamp and the link in one command and does nothing; a changed unit, a switched
runtime or a failed earlier proof runs the probe again, with its output streamed live.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, FunctionCommand, StringCommand, operation

from vllm_rig.core.become import sudo_args


class Proof(FactBase):
    """{"stamp": text of the stamp file or None, "current": where the runtime link points or None}."""

    def command(self, stamp: str, link: str) -> str:
        script = (
            f'printf "stamp=%s\\n" "$(cat {shlex.quote(stamp)} 2>/dev/null)"; '
            f'printf "current=%s\\n" "$(readlink {shlex.quote(link)})"'
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {"stamp": values.get("stamp") or None, "current": values.get("current") or None}


@operation(is_idempotent=True)
def proven(probe: str, stamp: str, link: str, fingerprint: str):
    """Run `probe` (streamed) unless the stamp says this fingerprint on this runtime was already proven."""
    found = host.get_fact(Proof, stamp=stamp, link=link)
    key = f"{fingerprint}:{found['current']}"
    if found["stamp"] == key:
        host.noop("already proven for this unit and runtime")
        return
    yield FunctionCommand(_run_streamed, (probe,), {})
    directory = shlex.quote(stamp.rsplit("/", 1)[0])
    yield f"mkdir -p {directory} && printf '%s\\n' {shlex.quote(key)} > {shlex.quote(stamp)}"


@operation(is_idempotent=False)
def streamed(command: str):
    """Run a command whose output a person wants to watch (a benchmark), printed as it comes."""
    yield FunctionCommand(_run_streamed, (command,), {})


def _run_streamed(state, host, probe: str) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    ok, _ = host.run_shell_command(StringCommand(probe), print_output=True, **sudo_args(host))
    return ok
