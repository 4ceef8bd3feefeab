"""Figures measured on the sandbox, shared by the e2e tests (which assert on them) and benchmarks/ (which print
them): the download overlapping the runtime build, the bytes fetched again after a cut, and a driver change
timed to the service answering again. Each resets what it measures on rig1; DeployFailed when a deploy fails.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from tests.conftest import Rig
from tests.e2e import model, service
from tests.e2e.deploys import DeployFailed, DeployRun, deploy, fresh, unit_span, unit_spans
from tests.sandbox import paths
from tests.sandbox.fixtures import forge

# A forced rebuild on a provisioned box needs only these (driver and CUDA are there); a fresh box runs
# deploy.py's stages through model finish (THROUGH_MODEL_FINISH).
REBUILD_STAGES = ("tasks/model_start.py", "tasks/runtime.py", "tasks/model_finish.py")
BUILD_SECONDS = 2.0  # the forge's default compile time, put back after a scenario


def deploy_stages() -> tuple[str, ...]:
    """deploy.py's stage files, in its order (read from its local.include lines)."""
    return tuple(re.findall(r'^local\.include\("([^"]+)"\)', (paths.REPO / "deploy.py").read_text(), re.M))


def through_model_finish() -> tuple[str, ...]:
    """deploy.py from preflight through model finish: the part that holds both the download and the build
    (what follows, verify to models keep, waits for both to be done)."""
    stages = deploy_stages()
    return stages[: stages.index("tasks/model_finish.py") + 1]


def _ok(run: DeployRun) -> DeployRun:
    if not run.ok:
        raise DeployFailed(run)
    return run


Span = tuple[float, float]


@dataclass
class Overlap:
    run: DeployRun
    wall: float  # the measured deploy (its stages: `stages`), on the control side
    stages: tuple[str, ...]
    began: float  # epoch seconds when the deploy began (host clocks are the same machine's)
    download_runs: list[Span]  # each run of the download unit, seconds after the deploy began (host journal)
    build_at: Span  # the build unit's run, likewise

    @property
    def download_at(self) -> Span:
        return self.download_runs[0][0], self.download_runs[-1][1]

    @property
    def download(self) -> float:
        """The download unit's running time, all its runs (a reboot cuts it into two)."""
        return sum(end - begin for begin, end in self.download_runs)

    @property
    def build(self) -> float:
        return self.build_at[1] - self.build_at[0]

    @property
    def together(self) -> float:
        """How long both ran at once."""
        (b0, b1) = self.build_at
        return sum(max(0.0, min(d1, b1) - max(d0, b0)) for d0, d1 in self.download_runs)

    @property
    def ratio(self) -> float:
        """1.0 or more: one after the other; 0.5: perfect overlap of two equal halves."""
        return self.wall / (self.download + self.build)


def overlap(rig: Rig, download_s: float = 80.0, build_s: float = 10.0) -> Overlap:
    """The model downloaded while a runtime is built again (forced, so there is always a build) on a box
    that has the host stage (the build needs CUDA): model start, runtime and model finish in one run; caches
    are warm. The mirror is throttled so the download takes about download_s (longer than the build, whose
    installing the fork's whole requirement closure takes ~45 s here and 55 s with the machine busy, when a
    55 s download ended as model finish began and it printed no progress: 80 s leaves it waiting); the
    fork's compile takes build_s (the build's other steps add their own time)."""
    model.reset_model(rig)
    return _measured(rig, REBUILD_STAGES, {"force_rebuild": True}, download_s, build_s)


def overlap_fresh(rig: Rig, download_s: float, build_s: float, secure_boot: bool | None = None) -> Overlap:
    """A fresh machine (tree from the image, booted) deployed with deploy.py through model finish: preflight,
    the download started, the driver (with its reboot, which stops the download; model resume starts it
    again), CUDA, the first runtime build (apt, git and pip from nothing) and the wait for the model.
    secure_boot: the NVIDIA stand-in's knob before the first boot (None: its default)."""
    if secure_boot is None:
        fresh(rig)
    else:
        fresh(rig, secure_boot=secure_boot)
    return _measured(rig, through_model_finish(), {}, download_s, build_s)


def _measured(rig: Rig, stages: tuple[str, ...], data: dict[str, object], download_s: float, build_s: float) -> Overlap:
    model.knobs(throttle_bytes_per_s=int(model.total() / download_s))
    forge.write_knobs(build_seconds=build_s)
    since = time.time()
    try:
        started = time.monotonic()
        run = _ok(deploy(rig, *stages, data=data))
        wall = time.monotonic() - started
    finally:
        model.knobs()
        forge.write_knobs(build_seconds=BUILD_SECONDS)
    built = json.loads(model.sh(rig, "cat /opt/vllm-rig/current/runtime.json"))["name"]
    fetches = [(a - since, b - since) for a, b in unit_spans(rig, model.UNIT, since)]
    b0, b1 = unit_span(rig, f"vllm-rig-build-{built}.service", since)
    return Overlap(run, wall, stages, since, fetches, (b0 - since, b1 - since))


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
