"""Run a command once per key: the key is written to a stamp file after the command succeeds, so a
failed run repeats it next time and a changed input (a new key) runs it again."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from vllm_rig.core.facts import FileText


@operation()
def once_per_key(command: str, stamp: str, key: str):
    if (host.get_fact(FileText, path=stamp) or "").strip() == key:
        host.noop(f"{stamp} is at {key}")
        return
    directory = shlex.quote(stamp.rsplit("/", 1)[0])
    yield f"{command} && mkdir -p {directory} && printf '%s\\n' {shlex.quote(key)} > {shlex.quote(stamp)}"
