"""pyinfra as `.venv/bin/pyinfra ARGS` runs it (bin/deploy, bin/status, bin/triage and bin/rig run this), with
two differences an owner reads:

- Ctrl-C ends the run at once: exit 130 and one line saying what goes on on the box, nothing after it.
  pyinfra's own handler prints "Exiting upon user request!", exits 0, and its greenlets may print a few
  more lines of a build first; a traceback from the prompt or a wrapper was the other ending.
- The lines the run defers (vllm_rig/core/end_of_run.py: the summary's URL, model name, key, CA and curl)
  print after pyinfra's output, its results table included, so they are the last thing on the screen.

    .venv/bin/python -m vllm_rig.cli.pyinfra_run inventory.py deploy.py -y
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from vllm_rig.core import end_of_run

# Tasks that only read: stopping them leaves the box as it was.
READ_ONLY = ("tasks/check.py", "tasks/status.py", "tasks/triage.py", "tasks/fork_releases.py", "tasks/preflight.py")
CHANGES = (
    "stopped (Ctrl-C): a runtime build or a model download on the box runs in its own unit and carries on; "
    "the next run picks it up"
)


def interrupted_line(argv: Sequence[str]) -> str:
    if "tasks/logs.py" in argv:
        return "stopped following (Ctrl-C); nothing on the box changed"
    if any(task in argv for task in READ_ONLY):
        return "stopped (Ctrl-C); this command only reads: nothing on the box changed"
    if "--dry" in argv:
        return "stopped (Ctrl-C); --dry changes nothing on the box"
    return CHANGES


def _on_interrupt(line: str) -> Callable:
    def handler(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.write(2, f"\n{line}\n".encode())
        os._exit(130)  # at once: no greenlet, finally block or atexit hook prints after the line

    return handler


def _pyinfra_cli(argv: list[str]) -> int:
    """pyinfra_cli.main.main's set-up (pyinfra 3.x), less its SIGINT handler; the exit code."""
    import click
    import pyinfra
    from pyinfra.api.output import set_echo, set_formatter
    from pyinfra_cli.cli import cli  # type: ignore[import-untyped]

    pyinfra.is_cli = True
    set_formatter(click.style)
    set_echo(click.echo)
    sys.dont_write_bytecode = True
    sys.path.append(".")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    try:
        cli.main(args=argv, prog_name="pyinfra")
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def main(argv: list[str], run: Callable[[list[str]], int] = _pyinfra_cli) -> int:
    signal.signal(signal.SIGINT, _on_interrupt(interrupted_line(argv)))
    end_of_run.defer()
    rc = run(argv)
    last = end_of_run.take()
    if last:
        print()
        for line in last:
            print(line)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
