"""pyinfra's operation order, read from the frames alone.

pyinfra orders operations by the line numbers of the calls that led to them, from the deploy file down
(pyinfra/api/util.py: get_operation_order_from_stack). It reads them with inspect.stack(), which opens
every frame's source file and searches sys.modules for each frame's module: ~3 ms per operation, ~135 ms
of a no-op re-run of deploy.py on an idle machine; on a loaded 2-core one (load 7, the sandbox's re-run of 69
operations, timed inside the process, three runs each) 0.60-1.04 s against 2-6 ms here. The frames hold the same
file names and line numbers. The hook replaces the function where pyinfra's operation module calls it, once
per process, from config.py and our inventories; tests/unit/test_op_order.py runs a deploy of nested calls
through the real CLI with and without it and compares every operation's order.
"""

from __future__ import annotations

import importlib
import sys
from types import FrameType
from typing import Any

import pyinfra
from pyinfra.api.util import PYINFRA_INSTALL_DIR

# pyinfra.api re-exports the `operation` decorator under the module's own name: import the module itself.
_operation = importlib.import_module("pyinfra.api.operation")

_ORIGINAL_NAME = "get_operation_order_from_stack"


def operation_order(state: Any) -> list[int]:
    """The same list as pyinfra's: the op file's number (CLI), then the line of each frame from the
    outermost frame of the current deploy file inward, skipping pyinfra's own frames."""
    frames = []
    frame: FrameType | None = sys._getframe(
        1
    )  # the caller (pyinfra's operation module), as inspect.stack() would start
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()

    start = 0
    if state.current_deploy_filename:
        # The first frame of the deploy file; as pyinfra's loop leaves it, the last frame when there is none.
        deploy_frames = (i for i, each in enumerate(frames) if each.f_code.co_filename == state.current_deploy_filename)
        start = next(deploy_frames, max(len(frames) - 1, 0))

    line_numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    for each in frames[start:]:
        if not each.f_code.co_filename.startswith(PYINFRA_INSTALL_DIR):
            line_numbers.append(each.f_lineno)
    return line_numbers


def install() -> None:
    """Point pyinfra's operation module at operation_order. Idempotent; fails loudly if pyinfra no longer
    has the function it replaces (a pyinfra upgrade must be looked at, not silently reordered)."""
    current = getattr(_operation, _ORIGINAL_NAME)
    if current is operation_order:
        return
    setattr(_operation, _ORIGINAL_NAME, operation_order)
