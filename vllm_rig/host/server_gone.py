#!/usr/bin/env python3
"""Has the vLLM server died? Every wait on the server (the start check, the deploy's probe) asks this between
polls of /health, so a server that exits at start (a flag it refuses, out of memory while the KV cache is
allocated, a CUDA error) is said at once with its own error line, not after the whole start timeout.

The facts come from systemd, the only one that saw the process end:
    systemctl show UNIT -p MainPID,ActiveState,SubState,Result,ExecMainCode,ExecMainStatus
prints one `Name=value` line per property. While the unit's ExecStartPost (the start check) runs, systemd keeps
the unit "activating (start-post)" even after the main process exited: MainPID=0 then, and ExecMainCode /
ExecMainStatus say how it ended (CLD_EXITED=1 with the exit status, CLD_KILLED=2 / CLD_DUMPED=3 with the
signal). The start check also knows the main process from $MAINPID (systemd sets it for control processes)
and looks at /proc/PID. The server's own words are the journal's last error-like lines:
    journalctl -u UNIT -n 40 -o cat
which also carries systemd's "Main process exited, code=exited, status=2/INVALIDARGUMENT". Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping

PROPERTIES = ("MainPID", "ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus")
# siginfo's si_code, as systemd records the main process's end (ExecMainCode)
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
# The signals a stop sends: the server did not die by itself then.
STOP_SIGNALS = {2: "INT", 9: "KILL", 15: "TERM"}
SIGNALS = {6: "ABRT", 7: "BUS", 8: "FPE", 11: "SEGV", **STOP_SIGNALS}
# systemd's names of exit statuses (systemctl status prints "status=2/INVALIDARGUMENT"): the LSB ones
EXIT_NAMES = {
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
    137: "KILL",
    203: "EXEC",
}
# Lines that say what went wrong, strongest first: argparse's refusal, CUDA's out of memory, a traceback's last
# line ("ValueError: ..."), any "error:"/"Error".
ERROR_PATTERNS = (
    re.compile(r"error: (argument|unrecognized arguments)"),
    re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE),
    re.compile(r"^\s*[A-Za-z_.]*(Error|Exception)\b:"),
    re.compile(r"\berror:|\bError\b|\bERROR\b"),
)
SYSTEMD_EXIT = re.compile(r"Main process exited, code=(\w+), status=(\S+)")
TRACEBACK = "Traceback (most recent call last)"


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show -p ...` output: one Name=value per line (a value may itself contain '=')."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def status_word(props: Mapping[str, str]) -> str:
    """How the main process ended, as systemctl status says it: status=2/INVALIDARGUMENT, signal=SEGV."""
    code, status = props.get("ExecMainCode", ""), props.get("ExecMainStatus", "")
    if not status.isdigit():
        return ""
    number = int(status)
    if code.isdigit() and int(code) in (CLD_KILLED, CLD_DUMPED):
        return f"signal={SIGNALS.get(number, number)}"
    name = EXIT_NAMES.get(number)
    return f"status={number}/{name}" if name else f"status={number}"


def died_by_itself(props: Mapping[str, str]) -> bool:
    """The main process ended on its own (a non-zero exit or a crash signal), not by a stop."""
    code, status = props.get("ExecMainCode", ""), props.get("ExecMainStatus", "")
    if not (code.isdigit() and status.isdigit()):
        return False
    if int(code) == CLD_EXITED:
        return int(status) != 0
    return int(code) in (CLD_KILLED, CLD_DUMPED) and int(status) not in STOP_SIGNALS


def gone(props: Mapping[str, str]) -> str | None:
    """Why the server is not coming up, from the unit's state, or None while it may still come.

    failed: the unit gave up. inactive: stopped (the start check's bound stops it). start-post or running with
    no main process: the server exited while the start check waited on it. auto-restart after the server's own
    non-zero exit or crash: systemd starts it again, but the same flags fail the same way; a restart the start
    check asked for (the process stopped by a signal) is waited for."""
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    main = props.get("MainPID", "")
    how = status_word(props)
    ended = f" ({how})" if how and died_by_itself(props) else ""
    if active == "failed":
        return f"the service failed (result {props.get('Result') or 'unknown'}){ended}"
    if active == "inactive":
        return f"the service is stopped{ended}"
    if sub in ("start-post", "running") and main == "0":
        return f"the server exited ({how})" if how else "the server exited"
    if sub == "auto-restart" and died_by_itself(props):
        return f"the server exited{ended}; systemd is restarting it"
    return None


def error_lines(journal: str, keep: int = 3) -> list[str]:
    """The last error-like lines of the journal's text (systemd's own "Main process exited" line left out: its
    status is said from the unit's state). After a traceback its last line is kept: the exception."""
    lines = [line.rstrip() for line in journal.splitlines() if line.strip()]
    found: list[str] = []
    for line in lines:
        if SYSTEMD_EXIT.search(line) or "Failed with result" in line or TRACEBACK in line:
            continue
        if any(p.search(line) for p in ERROR_PATTERNS):
            found.append(line.strip())
    return found[-keep:]


def why(journal: str) -> str:
    """The one line that says best why the server died: the strongest pattern's last match."""
    candidates = error_lines(journal, keep=40)
    for pattern in ERROR_PATTERNS:
        hits = [line for line in candidates if pattern.search(line)]
        if hits:
            return hits[-1]
    return ""


def exit_from_journal(journal: str) -> str:
    """systemd's own status word, where the journal carries it: status=2/INVALIDARGUMENT."""
    found = SYSTEMD_EXIT.findall(journal)
    return found[-1][1] if found else ""


def one_line(reason: str, journal: str, limit: int = 300) -> str:
    """`reason`, then the server's own error line: what a waiting deploy prints for the host."""
    said = " ".join(why(journal).split())
    if len(said) > limit:
        said = said[: limit - 3] + "..."
    if "status=" not in reason and (word := exit_from_journal(journal)):
        reason = f"{reason} (status={word})"
    return f"{reason}: {said}" if said else f"{reason}; its journal has no error line (journalctl -u the service)"


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


Run = Callable[[list[str]], str]


def show(unit: str, run: Run | None = None) -> dict[str, str]:
    return parse_show((run or _run)(["systemctl", "show", unit, "-p", ",".join(PROPERTIES)]))


def journal(unit: str, run: Run | None = None, lines: int = 40) -> str:
    return (run or _run)(["journalctl", "--no-pager", "-u", unit, "-n", str(lines), "-o", "cat"])


def pid_alive(pid: str, proc: str = "/proc") -> bool:
    """The process is there and not a zombie (a reaped process has no /proc entry)."""
    try:
        with open(os.path.join(proc, pid, "stat")) as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def watcher(
    unit: str, main_pid: str | None = None, run: Run | None = None, proc: str = "/proc"
) -> Callable[[], str | None]:
    """A check for the waits: None while the server may still come up, else the line that says why not.

    With `main_pid` (the start check's $MAINPID) the process's /proc entry is read first, a file read per poll;
    systemd is asked when it is gone, or on every poll without it."""

    def check() -> str | None:
        if main_pid and main_pid.isdigit() and pid_alive(main_pid, proc):
            return None
        props = show(unit, run)
        if not props:
            return None  # no systemd to ask (a probe run by hand): only /health says
        reason = gone(props)
        if reason is None and main_pid and main_pid.isdigit():
            reason = f"the server (pid {main_pid}) exited"
        if reason is None:
            return None
        return one_line(reason, journal(unit, run))

    return check


def main(argv: list[str] | None = None) -> int:
    """`server_gone --unit U`: one line on why the server is not serving, after a start that failed. Exit 1 and
    the line when it died; exit 0 and its state when systemd still has it coming."""
    parser = argparse.ArgumentParser(description="Has the vLLM server died? (module doc)")
    parser.add_argument("--unit", required=True)
    args = parser.parse_args(argv)
    props = show(args.unit)
    reason = gone(props)
    if reason is None:
        state = f"{props.get('ActiveState', 'unknown')} ({props.get('SubState', '?')})"
        print(f"{args.unit} is {state}: {why(journal(args.unit)) or 'no error line in its journal'}", flush=True)
        return 0
    print(f"{args.unit}: {one_line(reason, journal(args.unit))}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
