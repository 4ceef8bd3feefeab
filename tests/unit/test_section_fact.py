"""The facts' base (vllm_rig.core.facts): one command of sections, each snippet's failure contained, and a
parse failure that fails its host with one line instead of a traceback. The two-host pyinfra run over SSH
is tests/sandbox/test_fact_failure.py; here the real pyinfra API with @fake hosts."""

from __future__ import annotations

import subprocess

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.facts import get_fact
from pyinfra.context import ctx_host, ctx_state

from vllm_rig.core.facts import FactUnreadable, SectionFact, Sections, section_command


class Pair(SectionFact[tuple[int, str]]):
    DEFAULT = (0, "")

    def command(self) -> str:
        return section_command({"n": "echo 3", "word": "echo w"})

    def parse(self, sections: Sections) -> tuple[int, str]:
        return sections.integer("n"), sections.lines("word")[0]


class Required(SectionFact[str | None]):
    DEFAULT = None

    def command(self) -> str:
        return section_command({"id": "cat /proc/sys/kernel/random/boot_id"})

    def parse(self, sections: Sections) -> str | None:
        return sections.required("id")


def test_every_section_is_there_when_a_snippet_fails_or_its_tool_is_missing() -> None:
    command = section_command({"a": "echo 1; false", "b": "no-such-tool-vllm-rig 2>&1", "c": "echo 3; (exit 3)"})
    run = subprocess.run(command, shell=True, capture_output=True, text=True)
    assert run.returncode == 0
    lines = run.stdout.splitlines()
    assert lines[:2] == ["@@a", "1"] and lines[2] == "@@b" and "not found" in lines[3]
    assert lines[4:] == ["@@c", "3"]


def test_a_section_name_must_be_one_word() -> None:
    with pytest.raises(ValueError):
        section_command({"two words": "true"})


def test_what_a_parser_cannot_read_is_named_with_its_value() -> None:
    assert Pair().process(["@@n", "3", "@@word", "w"]) == (3, "w")
    with pytest.raises(FactUnreadable, match=r"^Pair could not read n '\[N/A\]'$"):
        Pair().process(["@@n", "[N/A]", "@@word", "w"])
    with pytest.raises(FactUnreadable, match=r"^Pair could not read its output \(IndexError: list index"):
        Pair().process(["@@n", "3", "@@word"])
    with pytest.raises(FactUnreadable, match=r"^Required could not read id \(missing\)$"):
        Required().process(["@@other"])


def _state(outputs: dict[str, list[str]]) -> State:
    hosts = [(f"@fake/{name}", {"fake_responses": {"echo @@n": lines}}) for name, lines in outputs.items()]
    state = State(Inventory((hosts, {})), Config())
    connect_all(state)
    return state


def _read(state: State, name: str) -> tuple[int, str]:
    box = state.inventory.get_host(f"@fake/{name}")
    with ctx_state.use(state), ctx_host.use(box):
        return get_fact(state, box, Pair)


def test_while_planned_the_host_fails_and_its_stage_stops_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _state({"good": ["@@n", "3", "@@word", "w"], "odd": ["@@n", "[N/A]", "@@word", "w"]})
    with pytest.raises(FactUnreadable, match=r"^@fake/odd: Pair could not read n '\[N/A\]'$"):
        _read(state, "odd")
    assert _read(state, "good") == (3, "w")
    odd = state.inventory.get_host("@fake/odd")
    assert odd in state.failed_hosts and odd not in state.active_hosts
    assert [h.name for h in state.inventory.get_active_hosts()] == ["@fake/good"]
    said = [r.getMessage() for r in caplog.records if "could not read" in r.getMessage()]
    assert said == ["@fake/odd: Pair could not read n '[N/A]'"]  # one line, no traceback logged


def test_while_executing_the_host_fails_and_gets_the_default() -> None:
    state = _state({"good": ["@@n", "3", "@@word", "w"], "odd": ["@@n", "", "@@word", "w"]})
    state.is_executing = True
    assert _read(state, "odd") == (0, "")
    assert _read(state, "good") == (3, "w")
    assert [h.name for h in state.failed_hosts] == ["@fake/odd"]


def test_a_fact_without_a_default_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="sets DEFAULT"):

        class NoDefault(SectionFact[int]):
            def command(self) -> str:
                return section_command({"n": "echo 1"})


def test_each_caller_gets_its_own_copy_of_the_default() -> None:
    class Listed(SectionFact[list[str]]):
        DEFAULT: list[str] = []

    got = Listed().default()
    got.append("changed by a caller")
    assert Listed().default() == [] and Listed.DEFAULT == []
