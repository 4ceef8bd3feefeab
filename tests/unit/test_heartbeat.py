"""A line at least every 30 s while an operation is quiet on a host; none while the host has its own news."""

from __future__ import annotations

import logging

from vllm_rig.core.heartbeat import INTERVAL_S, TARGET_S, TICK_S, Heartbeat, _Heard, elapsed, operation_name


def test_a_quiet_operation_gets_a_line_every_interval() -> None:
    beat = Heartbeat(interval_s=30.0)
    beat.start("gpubox", "Driver | NVIDIA driver 580", now=0.0)
    assert beat.tick(29.0) == []
    assert beat.tick(30.0) == ["[gpubox] Driver | NVIDIA driver 580: still running, 30s so far"]
    assert beat.tick(45.0) == []
    assert beat.tick(61.0) == ["[gpubox] Driver | NVIDIA driver 580: still running, 1m01s so far"]
    beat.end("gpubox")
    assert beat.tick(200.0) == []


def test_a_host_that_prints_its_own_progress_gets_no_heartbeat() -> None:
    beat = Heartbeat(interval_s=30.0)
    beat.start("a", "Runtime | build", now=0.0)
    beat.start("b", "CUDA | CUDA toolkit 12.8", now=0.0)
    heard = _Heard(beat, clock=lambda: 25.0)
    heard.emit(logging.LogRecord("pyinfra", logging.INFO, "", 0, "[a] build: [12/40] Building CUDA object", None, None))
    assert beat.tick(31.0) == ["[b] CUDA | CUDA toolkit 12.8: still running, 31s so far"]
    assert beat.tick(55.0) == ["[a] Runtime | build: still running, 55s so far"]


def test_pyinfras_coloured_host_prefix_counts_as_the_hosts_line() -> None:
    beat = Heartbeat(interval_s=30.0)
    beat.start("rig1", "x", now=0.0)
    _Heard(beat, clock=lambda: 20.0).emit(
        logging.LogRecord("pyinfra", logging.INFO, "", 0, "\x1b[1m[rig1]\x1b[0m downloading", None, None)
    )
    assert beat.tick(40.0) == [] and beat.tick(50.0) != []


def test_names_and_times_read_as_a_person_says_them() -> None:
    assert operation_name({"tasks/cuda.py | CUDA | CUDA toolkit 12.8"}) == "CUDA | CUDA toolkit 12.8"
    assert operation_name({"Sleep a while"}) == "Sleep a while"
    assert (elapsed(5), elapsed(60), elapsed(905)) == ("5s", "1m00s", "15m05s")


def test_an_operation_under_a_known_timeout_says_how_much_is_left_at_most() -> None:
    beat = Heartbeat(interval_s=30.0)
    beat.bound("rig1", "vllm-rig enabled and started", 900)
    beat.start("rig1", "Service | vllm-rig enabled and started", now=0.0)
    beat.start("rig2", "Service | vllm-rig enabled and started", now=0.0)  # no bound declared for rig2
    assert beat.tick(30.0) == [
        "[rig1] Service | vllm-rig enabled and started: still running, 30s so far, at most 14m30s left",
        "[rig2] Service | vllm-rig enabled and started: still running, 30s so far",
    ]
    assert beat.tick(905.0)[0].endswith("still running, 15m05s so far, past its 15m00s bound")


def test_the_interval_and_the_tick_keep_lines_within_the_target() -> None:
    # a host quiet since t=0 gets its line at the first tick at or after INTERVAL_S: at most TICK_S later
    assert INTERVAL_S + TICK_S <= TARGET_S == 30.0
    beat = Heartbeat()
    beat.start("rig1", "x", now=0.0)
    ticks = [t * TICK_S for t in range(1, 20)]
    said = [t for t in ticks if beat.tick(t)]
    assert said[0] <= TARGET_S and all(b - a <= TARGET_S for a, b in zip(said, said[1:], strict=False))
