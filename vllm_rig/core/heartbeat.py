"""A line at least every 30 s while an operation runs on a host and nothing else has been said about it: the
operation's name, the time it has taken so far and, where the stage declared the timeout it runs under
(`bound`), how much is left at most. One helper for every long step (the driver and its DKMS
build, CUDA, pip, the first start of the service): pyinfra prints nothing while a command runs.

Steps that print their own progress (the runtime build's "==> step" and "[n/m]", the model download's bytes)
stay as they are: a host's own line ("[host] ...") in the last 30 s counts as news, and no heartbeat follows it.
Installed once per run (vllm_rig/context.py) through pyinfra's state callbacks and a logging handler.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyinfra import logger
from pyinfra.api.state import BaseStateCallback

# Due after 25 s of quiet, looked at every 5 s: the owner's lines are never more than 30 s apart (with a
# 30 s interval they were up to 35 s: benchmarks/progress_gaps.py measured a 30.0 s gap at the edge).
TARGET_S = 30.0
TICK_S = 5.0
INTERVAL_S = TARGET_S - TICK_S
_HOST_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)*\s*\[([^\]]+)\]")  # "[host] ..." (pyinfra may colour it)


def elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class Heartbeat:
    """Which operation each host runs, since when, and when the host last had a line; `tick` says who is due."""

    interval_s: float = INTERVAL_S
    running: dict[str, tuple[str, float]] = field(default_factory=dict)  # host -> (operation, started)
    last_line: dict[str, float] = field(default_factory=dict)
    bounds: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, operation's own name) -> s

    def bound(self, host: str, operation: str, seconds: float) -> None:
        """`operation` (its own name) on `host` ends within `seconds`, a timeout it runs under: its lines say
        how much is left at most."""
        self.bounds[(host, operation)] = seconds

    def _left(self, host: str, operation: str, so_far: float) -> str:
        seconds = self.bounds.get((host, operation.split(" | ")[-1]))  # pyinfra prefixes the deploy's name
        if seconds is None:
            return ""
        left = seconds - so_far
        return f", at most {elapsed(left)} left" if left > 0 else f", past its {elapsed(seconds)} bound"

    def start(self, host: str, operation: str, now: float) -> None:
        self.running[host] = (operation, now)
        self.last_line[host] = now

    def end(self, host: str) -> None:
        self.running.pop(host, None)

    def heard(self, host: str, now: float) -> None:
        self.last_line[host] = now

    def tick(self, now: float) -> list[str]:
        """The heartbeat lines due now (each host's quiet for interval_s while its operation runs)."""
        due = []
        for host, (operation, started) in sorted(self.running.items()):
            if now - self.last_line.get(host, started) >= self.interval_s:
                so_far = now - started
                left = self._left(host, operation, so_far)
                due.append(f"[{host}] {operation}: still running, {elapsed(so_far)} so far{left}")
                self.last_line[host] = now
        return due


def bound(host: str, operation: str, seconds: float) -> None:
    """Declared while planning, by the stage that knows the timeout an operation runs under."""
    _BEAT.bound(host, operation, seconds)


def operation_name(names: set[str]) -> str:
    """The name a person knows the operation by: its stage and its own name, without the task file."""
    name = sorted(names or {"operation"})[0]
    parts = name.split(" | ")
    return " | ".join(parts[1:]) if len(parts) > 1 and parts[0].endswith(".py") else name


class _Heard(logging.Handler):
    def __init__(self, beat: Heartbeat, clock: Callable[[], float]) -> None:
        super().__init__(logging.DEBUG)
        self.beat, self.clock = beat, clock

    def emit(self, record: logging.LogRecord) -> None:
        match = _HOST_LINE.match(str(record.msg))
        if match:
            self.beat.heard(match.group(1), self.clock())


class _Callbacks(BaseStateCallback):
    @staticmethod
    def operation_host_start(state: Any, host: Any, op_hash: Any) -> None:
        _BEAT.start(host.name, operation_name(state.get_op_meta(op_hash).names), time.monotonic())
        _ticker()

    @staticmethod
    def operation_host_success(state: Any, host: Any, op_hash: Any, retry_count: int = 0) -> None:  # noqa: ARG004
        _BEAT.end(host.name)

    @staticmethod
    def operation_host_error(state: Any, host: Any, op_hash: Any, retry_count: int = 0, max_retries: int = 0) -> None:  # noqa: ARG004, E501
        _BEAT.end(host.name)


_BEAT = Heartbeat()
_installed: list[Any] = []
_ticking: list[Any] = []


def _ticker() -> None:
    """One greenlet for the run (pyinfra runs hosts as gevent greenlets), started with the first operation."""
    if _ticking:
        return
    import gevent  # type: ignore[import-untyped]  # pyinfra depends on it; no stubs in .venv

    def loop() -> None:
        while True:
            gevent.sleep(TICK_S)
            for line in _BEAT.tick(time.monotonic()):
                logger.info(line)

    _ticking.append(gevent.spawn(loop))


def install(state: Any) -> None:
    """Heartbeats for this run (the real State, once)."""
    if any(s is state for s in _installed):
        return
    _installed.append(state)
    state.add_callback_handler(_Callbacks())
    logger.addHandler(_Heard(_BEAT, time.monotonic))
