"""Lanes that take modules from one queue: each module is its own pytest session in the lane's checkout,
on the lane's sandbox slot, its output in a log file and its results in a JUnit file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Lane:
    number: int
    slot: int  # VLLM_RIG_SANDBOX_SLOT: ports and host-wide machine names of its own
    root: Path  # the checkout it runs in


@dataclass(frozen=True)
class Result:
    module: str
    lane: int
    rc: int
    seconds: float
    log: Path
    junit: Path

    @property
    def ok(self) -> bool:
        return self.rc == 0


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def lane_env(lane: Lane) -> dict[str, str]:
    env = {**os.environ, "VLLM_RIG_SANDBOX_SLOT": str(lane.slot)}
    if lane.number > 1:
        env.pop("VLLM_RIG_SANDBOX_ROOT", None)  # a root set for lane 1 must not be shared: the copy's own
    return env


def run_module(lane: Lane, module: str, out: Path) -> Result:
    log, junit = out / f"{slug(module)}.log", out / f"{slug(module)}.xml"
    cmd = [sys.executable, "-m", "pytest", module, "-p", "no:cacheprovider", f"--junitxml={junit}"]
    started = time.monotonic()
    with log.open("w") as sink:
        rc = subprocess.run(cmd, cwd=lane.root, env=lane_env(lane), stdout=sink, stderr=subprocess.STDOUT).returncode
    return Result(module, lane.number, rc, time.monotonic() - started, log, junit)


def run(lanes: list[Lane], queue: list[str], out: Path, said: Callable[[str], None] | None = None) -> list[Result]:
    """Every module of `queue` run once, in queue order, each by the first lane that is free."""
    pending, results, lock = list(queue), list[Result](), threading.Lock()
    say = said or (lambda line: print(line, flush=True))

    def work(lane: Lane) -> None:
        while True:
            with lock:
                if not pending:
                    return
                module = pending.pop(0)
            result = run_module(lane, module, out)
            with lock:
                results.append(result)
                verdict = "passed" if result.ok else f"FAILED (pytest exit {result.rc})"
                say(f"lanes: [{lane.number}] {module} {verdict} in {result.seconds:.0f} s")

    threads = [threading.Thread(target=work, args=(lane,), name=f"lane-{lane.number}") for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
