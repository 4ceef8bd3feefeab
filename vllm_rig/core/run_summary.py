"""What a run did per host, stage by stage: the operations that changed the host and the wall time each stage
took on it, for the summary at the end of a run.

pyinfra's state callbacks say when each operation starts (for all hosts at once: operations run in lock-step)
and when each host finishes it; an operation's stage is its name's first part after the task file
("tasks/driver.py | Driver | Hold the driver packages" is the Driver stage). Whether it changed the host is
pyinfra's own did_change(), read once every operation before the summary has completed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pyinfra.api.state import BaseStateCallback

# When each operation started (for all hosts at once), and when each host finished it: one run per process.
_started: dict[str, float] = {}
_done: dict[tuple[str, str], float] = {}
_installed: list[Any] = []


class _Clock(BaseStateCallback):
    @staticmethod
    def operation_start(state: Any, op_hash: Any) -> None:  # noqa: ARG004
        _started[op_hash] = time.monotonic()

    @staticmethod
    def operation_host_success(state: Any, host: Any, op_hash: Any, retry_count: int = 0) -> None:  # noqa: ARG004
        _done[(host.name, op_hash)] = time.monotonic()

    @staticmethod
    def operation_host_error(state: Any, host: Any, op_hash: Any, retry_count: int = 0, max_retries: int = 0) -> None:  # noqa: ARG004, E501
        _done[(host.name, op_hash)] = time.monotonic()


def install(state: Any) -> None:
    """Time this run's operations (the real State, once; call while the run is planned)."""
    if not any(s is state for s in _installed):
        _installed.append(state)
        state.add_callback_handler(_Clock())


@dataclass
class StageRun:
    stage: str
    operations: int
    changed: list[str]  # the names of the operations that changed the host
    seconds: float


def stage_of(name: str) -> str:
    parts = [p.strip() for p in name.split(" | ")]
    return parts[1] if parts[0].endswith(".py") and len(parts) > 2 else parts[0]


def host_stages(state: Any, host: Any) -> list[StageRun]:
    """The stages of the operations that have run on `host` so far, in run order."""
    started, done = _started, _done
    stages: dict[str, StageRun] = {}
    for op_hash in host.op_hash_order:
        op = state.ops[host].get(op_hash)
        if op is None or not op.operation_meta.is_complete():
            continue
        name = sorted(state.get_op_meta(op_hash).names or {"(unnamed)"})[0]
        run = stages.setdefault(stage_of(name), StageRun(stage_of(name), 0, [], 0.0))
        run.operations += 1
        if op.operation_meta.did_change():
            run.changed.append(name.split(" | ")[-1])
        if op_hash in started and (host.name, op_hash) in done:
            run.seconds += done[(host.name, op_hash)] - started[op_hash]
    return list(stages.values())
