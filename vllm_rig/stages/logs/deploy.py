"""Logs (on demand, read-only): the last lines of one log on each host, printed as pyinfra prints a command's
output, under the host's name; with logs_follow, new lines until Ctrl-C.

    pyinfra inventory.py tasks/logs.py --data logs_source=build --data logs_follow=true   (or bin/rig logs build -f)

service, download and watchdog are their systemd units' journals; build is the newest runtime build log
(the build runs in a transient unit whose output goes to that file).
"""

from __future__ import annotations

import shlex

from pyinfra.api import deploy

from vllm_rig import paths
from vllm_rig.core.stamp import streamed
from vllm_rig.settings import Settings


def log_command(s: Settings) -> str:
    """The one shell command that prints the chosen log."""
    n = s.logs_lines
    if s.logs_source == "build":
        newest = f"ls -t {paths.LOG_DIR}/build-*.log 2>/dev/null | head -n 1"
        follow = " -F" if s.logs_follow else ""
        return (
            f'f=$({newest}); if [ -z "$f" ]; then echo "no runtime build log on this host yet ({paths.LOG_DIR})"; '
            f'else echo "==> $f"; tail -n {n}{follow} "$f"; fi'
        )
    unit = {
        "service": f"{s.service_name}.service",
        "download": paths.MODEL_FETCH_UNIT,
        "watchdog": f"{paths.WATCHDOG_UNIT}.service",
    }[s.logs_source]
    return f"journalctl -u {shlex.quote(unit)} -n {n} --no-pager" + (" -f" if s.logs_follow else "")


@deploy("Logs")
def show_logs(s: Settings) -> None:
    follow = ", following (Ctrl-C ends)" if s.logs_follow else ""
    streamed(name=f"The {s.logs_source} log, last {s.logs_lines} lines{follow}", command=log_command(s))
