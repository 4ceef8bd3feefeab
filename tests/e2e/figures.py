"""Figures measured on the sandbox, shared by the e2e tests (which assert on them) and benchmarks/ (which print
them): the download overlapping the runtime build, the bytes fetched again after a cut, and a driver change
timed to the service answering again. Each resets what it measures on rig1; DeployFailed when a deploy fails.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from tests.conftest import Rig
from tests.e2e import model, service
from tests.e2e.deploys import DeployFailed, DeployRun, deploy, unit_span
from tests.sandbox.fixtures import forge

OVERLAP_STAGES = ("tasks/model_start.py", "tasks/runtime.py", "tasks/model_finish.py")  # deploy.py's order
BUILD_SECONDS = 2.0  # the forge's default compile time, put back after a scenario


def _ok(run: DeployRun) -> DeployRun:
    if not run.ok:
        raise DeployFailed(run)
    return run


@dataclass
class Overlap:
    run: DeployRun
    wall: float  # the deploy of the three stages, on the control side
    download_at: tuple[float, float]  # the download unit's run, seconds after the deploy began (host journal)
    build_at: tuple[float, float]  # the build unit's run, likewise

    @property
    def download(self) -> float:
        return self.download_at[1] - self.download_at[0]

    @property
    def build(self) -> float:
        return self.build_at[1] - self.build_at[0]

    @property
    def together(self) -> float:
        """How long both ran at once."""
        return max(0.0, min(self.download_at[1], self.build_at[1]) - max(self.download_at[0], self.build_at[0]))

    @property
    def ratio(self) -> float:
        """1.0 or more: one after the other; 0.5: perfect overlap of two equal halves."""
        return self.wall / (self.download + self.build)


def overlap(rig: Rig, download_s: float = 55.0, build_s: float = 10.0) -> Overlap:
    """The model downloaded while a runtime is built (forced, so there is always a build), in one run of
    model start, runtime and model finish. The mirror is throttled so the download takes about download_s
    (longer than the build, whose installing the fork's whole requirement closure now takes ~45 s here, so
    model finish still waits and shows its progress);
    the fork's compile takes build_s (the build's other steps add their own time). Needs the host stage
    done (the build needs CUDA)."""
    model.reset_model(rig)
    model.knobs(throttle_bytes_per_s=int(model.total() / download_s))
    forge.write_knobs(build_seconds=build_s)
    since = time.time()
    try:
        started = time.monotonic()
        run = _ok(deploy(rig, *OVERLAP_STAGES, data={"force_rebuild": True}))
        wall = time.monotonic() - started
    finally:
        model.knobs()
        forge.write_knobs(build_seconds=BUILD_SECONDS)
    built = json.loads(model.sh(rig, "cat /opt/vllm-rig/current/runtime.json"))["name"]
    fetch = unit_span(rig, model.UNIT, since)
    build = unit_span(rig, f"vllm-rig-build-{built}.service", since)
    return Overlap(run, wall, (fetch[0] - since, fetch[1] - since), (build[0] - since, build[1] - since))


@dataclass
class Refetch:
    run: DeployRun
    shard_gets: list[dict]  # the mirror's log lines for the cut shard
    shard_size: int
    served: int  # every byte of every file the mirror sent

    @property
    def refetched(self) -> int:
        """Bytes of the cut shard sent more than once."""
        return sum(g["bytes"] for g in self.shard_gets) - self.shard_size


def refetch_after_cut(rig: Rig, cut_bytes: int = 15_000_000) -> Refetch:
    """A fresh download of the model (model start and finish) with the mirror dropping the connection once,
    cut_bytes into the biggest shard."""
    model.reset_model(rig)
    model.knobs(drop_after_bytes={"path": model.BIG_SHARD, "bytes": cut_bytes})
    try:
        run = _ok(deploy(rig, *model.STAGE))
    finally:
        model.knobs()
    size = (model.source() / model.BIG_SHARD).stat().st_size
    return Refetch(run, model.gets(model.BIG_SHARD), size, sum(g["bytes"] for g in model.gets()))


@dataclass
class DriverChange:
    run: DeployRun
    started: float  # epoch seconds: the deploy with the new setting began
    wall: float  # the deploy, to its end
    answering: float  # from `started` to the first answer after the last unanswered request
    unanswered: list[service.Poll]  # requests the service did not answer meanwhile

    @property
    def outage(self) -> float:
        """From the first unanswered request to answering again (0 when none went unanswered)."""
        return self.answering - (self.unanswered[0].at - self.started) if self.unanswered else 0.0


def driver_change(
    rig: Rig, driver: str, data: dict[str, object] | None = None, limit: str | None = None, name: str = "rig1"
) -> DriverChange:
    """The whole deploy with nvidia_driver_version=driver on a serving box, /v1/models asked every half
    second meanwhile, until the service answers again after the deploy."""
    with service.Poller(service.api_key(rig, name), name) as poller:
        started, t0 = time.time(), time.monotonic()
        run = _ok(deploy(rig, "deploy.py", data={**(data or {}), "nvidia_driver_version": driver}, limit=limit))
        wall = time.monotonic() - t0
        back = poller.answering_again()
    return DriverChange(run, started, wall, back - started, poller.unanswered())
