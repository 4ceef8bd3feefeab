"""What the status view reads off a host, in one remote command: vllm_rig/host/status_probe.py run by the host's
python3 from the host package sent on stdin, with a spec built here from the stages' own fact commands (the
driver's packages and module, the runtimes and links), the state files in vllm_rig/paths.py, nvidia-smi's XML,
the service's systemd properties, and two local HTTP requests (/v1/models with the key, /metrics)."""

from __future__ import annotations

import shlex
from typing import Any

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.core.host_package import answer, run_from_stdin, said, stdin_text
from vllm_rig.core.secrets import SecretStdin
from vllm_rig.host import gpu_facts
from vllm_rig.host.model_fetch import MARKER as MODEL_MARKER
from vllm_rig.paths import (
    DRIVER_RECORD,
    GPU_VERDICT,
    HOST_FINGERPRINT,
    KEYS_DIR,
    LAN_ACCESS_LOG,
    MODEL_FETCH_STATUS,
    MODEL_FETCH_UNIT,
    START_CHECK_RESULT,
    WATCHDOG_RESULT,
    WATCHDOG_UNIT,
    Layout,
)
from vllm_rig.settings import Settings
from vllm_rig.stages.driver.facts import DriverState
from vllm_rig.stages.keys.facts import listing_command
from vllm_rig.stages.runtime.facts import RuntimeState

SERVICE_PROPERTIES: tuple[str, ...] = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ActiveEnterTimestamp",
    "NRestarts",
)
# How the server's main process ended, and when the current one started (a start check older is stale).
SERVICE_PROPERTIES += ("MainPID", "ExecMainCode", "ExecMainStatus", "ExecMainStartTimestamp")
JOURNAL_LINES = 40  # the service's last journal lines: the error line of a server that died
# The watchdog timer: installed and waiting for its first round has no result file yet. The timer is monotonic
# (OnBootSec/OnUnitInactiveSec), so systemd gives its next run as a time since boot (NextElapseUSecMonotonic, a
# timespan); /proc/uptime and the clock read in the same command turn it into a wall time.
TIMER_PROPERTIES = ("LoadState", "ActiveState", "NextElapseUSecRealtime", "NextElapseUSecMonotonic", "LastTriggerUSec")
MARKER_KEYS = ["repo", "revision", "commit", "completed_at", "total_bytes", "endpoint"]
RUNTIME_KEYS = ["name", "fingerprint", "built_at", "versions", "nvcc"]
VERDICT_KEYS = ["verdict", "exit_code", "problems", "gates", "driver_version", "elapsed_s"]


def probe_stdin() -> SecretStdin:
    """The host package for the probe's command (no secret line: the probe reads the key file on the host)."""
    return SecretStdin(stdin_text())


def api_address(s: Settings) -> str:
    """Where the host itself reaches the server: loopback when it binds every address."""
    host = "127.0.0.1" if s.server_host in ("0.0.0.0", "::", "") else s.server_host
    return f"[{host}]" if ":" in host else host


def status_spec(s: Settings, keys_since: float = 0.0) -> dict[str, Any]:
    """`keys_since`: the box's time of the last read of the requests per key (stages/keys/reads.py)."""
    layout = Layout.of(s)
    root = s.install_root
    unit = f"{s.service_name}.service"
    props = " ".join(f"-p {p}" for p in SERVICE_PROPERTIES)
    base = f"http://{api_address(s)}:{s.vllm_port}"
    keys = {"keys": listing_command(layout.host_package, KEYS_DIR, LAN_ACCESS_LOG, keys_since)}
    spec: dict[str, Any] = {
        "timeout": 10,
        "commands": (keys if s.lan_serving == "proxy" else {})
        | {
            "driver": DriverState().command(),
            "runtimes": RuntimeState().command(root=root),
            "cuda": "readlink -f /usr/local/cuda; /usr/local/cuda/bin/nvcc --version 2>/dev/null | grep release",
            "service": f"systemctl show {shlex.quote(unit)} --timestamp=unix {props}",
            "journal": f"journalctl --no-pager -u {shlex.quote(unit)} -n {JOURNAL_LINES} -o cat",
            "fetch_unit": f"systemctl show {MODEL_FETCH_UNIT} -p ActiveState",
            "gpus": " ".join(gpu_facts.COMMAND),  # read by the one GPU reader (vllm_rig/host/gpu_facts.py)
            "verdict_mtime": f"stat -c %Y {GPU_VERDICT}",
            "watchdog_timer": (
                f"systemctl show {WATCHDOG_UNIT}.timer --timestamp=unix "
                + " ".join(f"-p {p}" for p in TIMER_PROPERTIES)
                + "; echo Uptime=$(cut -d' ' -f1 /proc/uptime); echo Now=$(date +%s)"
            ),
        },
        "files": {
            "driver_record": DRIVER_RECORD,
            "host_fingerprint": HOST_FINGERPRINT,
            "start_check": START_CHECK_RESULT,
            "watchdog": WATCHDOG_RESULT,
            "verdict": GPU_VERDICT,
            "model_marker": f"{s.model_dir}/{MODEL_MARKER}",
            "fetch_status": MODEL_FETCH_STATUS,
            "runtime_json": f"{root}/runtimes/*/runtime.json",
            "build_status": f"{root}/runtimes/*/.build/status.json",
        },
        "json_keep": {"model_marker": MARKER_KEYS, "runtime_json": RUNTIME_KEYS, "verdict": VERDICT_KEYS},
        "http": {
            "api": {"url": f"{base}/v1/models", "key_file": layout.env_file},
            "metrics": {"url": f"{base}/metrics"},
        },
    }
    if s.chat_page:  # Open WebUI's own /health on loopback (no key: the page has its own accounts)
        spec["http"]["chat_page"] = {"url": f"http://127.0.0.1:{s.chat_page_backend_port}/health"}
    return spec


class RigStatus(SectionFact[dict[str, Any]]):
    """The probe's JSON (see status_probe.py), or {"error": ...} when it did not run. Pass `_stdin=probe_stdin()`."""

    @staticmethod
    def default() -> dict[str, Any]:
        return parse_probe([])

    def command(self, spec: str) -> str:
        return section_command({"probe": run_from_stdin("status_probe", [spec]) + " 2>&1"})

    def parse(self, sections: Sections) -> dict[str, Any]:
        return parse_probe(sections.lines("probe"))


def parse_probe(output: list[str]) -> dict[str, Any]:
    return answer(output, "commands") or {"error": f"the status probe did not run on the host: {said(output)}"}
