"""Pin a Debian alternative (e.g. /usr/local/cuda) so installing another toolkit cannot flip it."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, operation

from vllm_rig.facts.driver import FileText


class AlternativeTarget(FactBase):
    """Where /etc/alternatives/<name> points, or None."""

    def command(self, link: str) -> str:  # ("name" is reserved by pyinfra for operation names)
        return f"readlink /etc/alternatives/{shlex.quote(link)} || true"

    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output else None


@operation()
def alternative(link_name: str, path: str):
    """`update-alternatives --set` unless the alternative is already manual and pointing at `path`
    (auto mode would let any newer cuda-* package take /usr/local/cuda over)."""
    status = (host.get_fact(FileText, path=f"/var/lib/dpkg/alternatives/{link_name}") or "").splitlines()
    if status[:1] == ["manual"] and host.get_fact(AlternativeTarget, link=link_name) == path:
        host.noop(f"{link_name} -> {path} (manual)")
        return
    yield f"update-alternatives --set {shlex.quote(link_name)} {shlex.quote(path)}"
