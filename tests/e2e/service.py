"""The deployed service as a client sees it: the API key the host made, /v1/models on the host's vllm_port, and a
poller that records whether each request made while a deploy runs was answered."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from tests.conftest import Rig
from tests.sandbox import machine, paths


def port(name: str = "rig1") -> int:
    """The machine's vllm_port (inventory/sandbox.py): every machine shares the host's loopback."""
    return paths.VLLM_PORT_BASE + machine.Machine(name).index


def api_key(rig: Rig, name: str = "rig1") -> str:
    line = rig.ssh(name, "sudo grep ^VLLM_API_KEY= /etc/vllm-rig/vllm.env").strip()
    return line.split("=", 1)[1]


def models(key: str, name: str = "rig1", timeout: float = 30) -> list[str]:
    """GET /v1/models: the served model names (raises OSError when nothing answers)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port(name)}/v1/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


@dataclass(frozen=True)
class Poll:
    at: float  # epoch seconds (the machines share this clock), when the request was sent
    answered: bool
    detail: str  # the model names, or the error


@dataclass
class Poller:
    """A thread asking /v1/models every `interval` seconds while the `with` block runs."""

    key: str
    name: str = "rig1"
    interval: float = 0.5
    polls: list[Poll] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.time()
            try:
                poll = Poll(at, True, ",".join(models(self.key, self.name, timeout=5)))
            except (OSError, ValueError) as err:  # refused, reset, timed out, HTTP errors, half a body
                poll = Poll(at, False, f"{type(err).__name__}: {err}")
            self.polls.append(poll)
            self._stop.wait(self.interval)

    def unanswered(self) -> list[Poll]:
        return [p for p in self.polls if not p.answered]

    def answering_again(self, timeout: float = 60) -> float:
        """Wait for an answer after the last unanswered poll; its time (the first poll's when none failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            polls = list(self.polls)
            failed = [i for i, p in enumerate(polls) if not p.answered]
            after = polls[failed[-1] + 1 :] if failed else polls
            if after:
                return after[0].at
            time.sleep(self.interval)
        raise TimeoutError(f"{self.name}'s service did not answer within {timeout:.0f}s")
