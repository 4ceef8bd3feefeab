"""The guarded update's last step on a scripted host: the commands it runs for each outcome (switched, slower,
failed trial, a broken result file), through the real operation's FunctionCommand."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from vllm_rig.stages.update import deploy as update

ROLLBACK = "/opt/vllm-rig/bin/vllm-rig-rollback"
PROBE = "python3 /opt/vllm-rig/bin/vllm-rig-host.pyz service_probe --base-url http://127.0.0.1:8000"


def _bench(decode: float, prefill: float) -> str:
    size = {"n": 2, "decode_tps": decode, "prefill_tps": prefill, "ttft_s": 1.5, "acceptance": 0.75, "prompt_tokens": 2}
    return json.dumps({"label": "x", "summary": {"2K": size}})


@dataclass
class _Output:
    stdout: str


@dataclass
class ScriptedHost:
    """Answers `cat` of the two result files and `readlink` of current; records every command."""

    files: dict[str, str | None]
    current: list[str] = field(default_factory=lambda: ["/opt/vllm-rig/runtimes/new", "/opt/vllm-rig/runtimes/old"])
    name: str = "box"
    data: dict = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)

    def run_shell_command(self, command, print_output=False, **_):  # noqa: ARG002
        text = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
        self.commands.append(text)
        if text.startswith("cat "):
            body = self.files.get(text.split(" ", 1)[1].strip("'"))
            return body is not None, _Output(body or "")
        if text.startswith("readlink "):
            return True, _Output(self.current[0] + "\n")
        if text == ROLLBACK:
            self.current.pop(0)
        return True, _Output("")


def _decide(host: ScriptedHost) -> bool:
    return update._decide(
        None, host, 5.0, ROLLBACK, PROBE, "/var/lib/vllm-rig/service-proven", "fp", "/opt/vllm-rig", "a" * 40
    )


@pytest.fixture(autouse=True)
def _no_sudo(monkeypatch):
    monkeypatch.setattr(update, "sudo_args", lambda host: {})


def test_as_fast_stays_and_nothing_is_rolled_back() -> None:
    host = ScriptedHost({update.BEFORE: _bench(85, 1300), update.AFTER: _bench(84, 1290)})
    assert _decide(host) is True
    assert ROLLBACK not in host.commands and PROBE not in host.commands


def test_slower_rolls_back_proves_the_old_one_and_stamps_it() -> None:
    host = ScriptedHost({update.BEFORE: _bench(85, 1300), update.AFTER: _bench(60, 1300)})
    assert _decide(host) is True
    assert host.commands.index(ROLLBACK) < host.commands.index(PROBE)
    assert host.commands[-1] == "printf '%s\\n' fp:/opt/vllm-rig/runtimes/old > /var/lib/vllm-rig/service-proven"


@pytest.mark.parametrize("after", [None, "{not json", json.dumps({"summary": "broken"})])
def test_no_usable_result_of_the_new_runtime_rolls_back(after: str | None) -> None:
    host = ScriptedHost({update.BEFORE: _bench(85, 1300), update.AFTER: after})
    assert _decide(host) is True and ROLLBACK in host.commands and PROBE in host.commands


def test_the_operation_passes_every_argument_its_function_takes() -> None:
    inner = update.kept_if_not_slower.__wrapped__  # the operation's own generator (pyinfra wraps it)
    (command,) = list(inner(5.0, ROLLBACK, PROBE, "/stamp", "fp", "/opt/vllm-rig", "a" * 40))
    host = ScriptedHost({update.BEFORE: _bench(85, 1300), update.AFTER: _bench(85, 1300)})
    assert command.function(None, host, *command.args, **command.kwargs) is True
