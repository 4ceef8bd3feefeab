"""Pin a Debian alternative (e.g. /usr/local/cuda) so installing another toolkit cannot flip it."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, operation


class Alternative(FactBase):
    """{"mode": "auto"|"manual"|None, "target": where /etc/alternatives/<link> points}, in one command."""

    def command(self, link: str) -> str:  # ("name" is reserved by pyinfra for operation names)
        q = shlex.quote(link)
        script = (
            f'printf "mode=%s\\n" "$(head -1 /var/lib/dpkg/alternatives/{q} 2>/dev/null)"; '
            f'printf "target=%s\\n" "$(readlink /etc/alternatives/{q})"'
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict[str, str | None]:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {"mode": values.get("mode") or None, "target": values.get("target") or None}


@operation()
def alternative(link_name: str, path: str):
    """`update-alternatives --set` unless the alternative is already manual and pointing at `path`
    (auto mode would let any newer cuda-* package take /usr/local/cuda over)."""
    found = host.get_fact(Alternative, link=link_name)
    if found == {"mode": "manual", "target": path}:
        host.noop(f"{link_name} -> {path} (manual)")
        return
    yield f"update-alternatives --set {shlex.quote(link_name)} {shlex.quote(path)}"
