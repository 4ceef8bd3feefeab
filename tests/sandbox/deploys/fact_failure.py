"""A deploy for tests/sandbox/test_fact_failure.py: one fact on the rig's own base (vllm_rig.core.facts), read
while the run is planned (phase "plan") or by an `_if=` while it executes (phase "execute", after an earlier
operation wrote the odd value), through the stage entry every tasks/<stage>.py uses (context.run_stage).

The value files are what the test writes on each machine; the markers say which operations ran where.
"""

import os
import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from vllm_rig.context import run_stage
from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.run import host_failed
from vllm_rig.settings import Settings

DIR = "/tmp/vllm-rig-fact-test"
PHASE = os.environ["VLLM_RIG_FACT_TEST_PHASE"]


class TestValue(SectionFact[int]):
    """A number in a file; 0 when the host failed on it."""

    DEFAULT = 0

    def command(self, path: str) -> str:
        return section_command({"value": f"cat {shlex.quote(path)} 2>/dev/null"})

    def parse(self, sections: Sections) -> int:
        return sections.integer("value")


def mark(name: str) -> str:
    return f"touch {DIR}/ran-{name}"


@deploy("Read")
def read(s: Settings) -> None:
    value = host.get_fact(TestValue, path=f"{DIR}/planned")
    server.shell(name="after the planned read", commands=[f"echo {value} > {DIR}/planned-value", mark("read")])


@deploy("Later")
def later(s: Settings) -> None:
    if host_failed():
        return  # the host failed while the run was planned: nothing more is planned for it
    if PHASE == "execute":
        odd = "[N/A]" if host.name == "rig2" else "5"
        server.shell(
            name="the value turns odd on rig2", commands=[f"printf '%s\\n' {shlex.quote(odd)} > {DIR}/executed"]
        )
        server.shell(
            name="gated on the value read while executing",
            commands=[mark("gated")],
            _if=lambda: host.get_fact(TestValue, path=f"{DIR}/executed") > 0,
        )
    server.shell(name="the last operation", commands=[mark("last")])


run_stage(read)
run_stage(later)
