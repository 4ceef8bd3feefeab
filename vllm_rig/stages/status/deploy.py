"""Status (on demand, read-only): what state each host is in right now, one table per host.

    pyinfra inventory.py tasks/status.py                          (or bin/status)
    pyinfra inventory.py tasks/status.py --data status_format=json  (or bin/status --json): one line per host

One remote command per host (vllm_rig/host/status_probe.py from stdin, read-only), so it runs on a half-deployed
host too. The whole view is also written to bench-results/status/<host>.json here; the next run reads that file
back for the tokens per second since the last read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy

from vllm_rig.settings import Settings
from vllm_rig.stages.keys import reads
from vllm_rig.stages.status import report
from vllm_rig.stages.status.facts import RigStatus, probe_stdin, status_spec
from vllm_rig.stages.summary.deploy import client_url

RESULTS = Path("bench-results") / "status"


def _previous(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()).get("last_read") or None
    except (OSError, ValueError, AttributeError):
        return None


def read_status(s: Settings) -> dict:
    spec = status_spec(s, keys_since=reads.last_read(host.name))
    raw = host.get_fact(RigStatus, spec=json.dumps(spec, sort_keys=True), _stdin=probe_stdin())
    path = RESULTS / f"{host.name}.json"
    url = client_url(str(host.data.get("ssh_hostname") or host.name), s)
    status = report.build(host.name, raw, s, _previous(path), url)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(status, indent=1, sort_keys=True) + "\n")
    listing = report.keys_listing(raw) if "error" not in raw else None
    if listing and listing.get("now"):
        reads.mark_read(host.name, float(listing["now"]))  # the next read counts from here (as bin/rig keys list)
    return status


@deploy("Status")
def show_status(s: Settings) -> None:
    status = read_status(s)
    if s.status_format == "json":
        print(report.render_json(status), file=sys.stdout, flush=True)
    else:
        logger.info(report.render_table(status))
