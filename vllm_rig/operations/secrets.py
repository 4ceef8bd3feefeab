"""The service's API key: made once on the host, kept in a root-owned env file readable by the service.

The key is generated on the host and never travels through pyinfra: no command line or output holds it.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, operation


class KeyFile(FactBase):
    """{"exists", "has_key", "mode", "group"} for an env file, without reading the key itself."""

    def command(self, path: str) -> str:
        p = shlex.quote(path)
        script = (
            f'if [ -f {p} ]; then echo "exists=1"; echo "has_key=$(grep -c "^VLLM_API_KEY=." {p})"; '
            f'stat --printf "mode=%a\ngroup=%G\n" {p}; else echo exists=0; fi'
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "exists": values.get("exists") == "1",
            "has_key": int(values.get("has_key") or 0) > 0,
            "mode": values.get("mode"),
            "group": values.get("group"),
        }


GENERATE = "python3 -c 'import secrets; print(\"VLLM_API_KEY=\" + secrets.token_urlsafe(32))'"


@operation()
def api_key_file(path: str, group: str, enabled: bool):
    """With `enabled`, the file holds a VLLM_API_KEY made once (kept across runs); without, none."""
    found = host.get_fact(KeyFile, path=path)
    p, tmp = shlex.quote(path), shlex.quote(path + ".new")
    if enabled and not found["has_key"]:
        yield f"umask 077; mkdir -p $(dirname {p}) && {GENERATE} > {tmp} && mv {tmp} {p}"
    elif not enabled and (found["has_key"] or not found["exists"]):
        yield f"umask 077; mkdir -p $(dirname {p}) && echo '# vllm_api_key: none' > {tmp} && mv {tmp} {p}"
    elif found["mode"] == "640" and found["group"] == group:
        host.noop(f"{path} is in place")
        return
    yield f"chown root:{shlex.quote(group)} {p} && chmod 640 {p}"
