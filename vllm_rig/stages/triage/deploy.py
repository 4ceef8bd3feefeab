"""Triage (on demand): one archive per host to attach to a bug report, fetched to ./triage/ here.

    pyinfra inventory.py tasks/triage.py     (or bin/triage)

The preflight verdict and the status view are read as their own tasks read them; the host writes the archive
(vllm_rig/host/triage.py, sent on stdin in the host package: nothing installed first) with the GPU verdict,
versions, the rendered unit, the journal of the service and of the build, and the kernel's NVIDIA lines.
Secrets never leave the host: the settings go in with SECRET_KEYS redacted, and every value of the API key's,
the HF token's and the model peer token's files, and whatever has a secret's shape (NAME=value for names ending
in _KEY/_TOKEN/_SECRET/_PASSWORD, --api-key's value, a URL's user:password@) is replaced by <redacted:NAME> in
every part before the archive is written. The control machine's own secrets (the store's password, the MOK
password) are not sent to the host: the fetched archive is redacted of them here."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.operations import files, python

from vllm_rig.core.host_package import run_from_stdin, stdin_text
from vllm_rig.core.secrets import SecretStdin
from vllm_rig.host.triage import SPEC_ENV
from vllm_rig.paths import STATE_DIR
from vllm_rig.settings import Settings
from vllm_rig.stages.preflight import checks as preflight
from vllm_rig.stages.preflight.deploy import preflight_checks
from vllm_rig.stages.status.deploy import read_status
from vllm_rig.stages.triage import bundle

RESULTS = Path("triage")


@operation(is_idempotent=False)
def write_bundle(spec: dict):
    """Write the archive on the host (always: a bundle is a snapshot of now)."""
    # The spec (it lists the secret values to redact) is stdin's first line, the host package follows: neither is on
    # a command line.
    command = run_from_stdin("triage", [], secret_env=SPEC_ENV)
    yield StringCommand(command, _stdin=SecretStdin(stdin_text(json.dumps(spec, sort_keys=True))))


@deploy("Triage")
def triage(s: Settings) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    top = f"{host.name}-triage-{stamp}"
    remote = f"{STATE_DIR}/triage/{top}.tar.gz"
    given = bundle.given_parts(s, preflight.render_json(host.name, preflight_checks(s)), read_status(s))
    write_bundle(name=f"Triage bundle {top}.tar.gz on the host", spec=bundle.spec(s, remote, top, given))
    RESULTS.mkdir(exist_ok=True)
    local = RESULTS / f"{top}.tar.gz"
    files.get(name="Triage bundle to triage/", src=remote, dest=str(local))
    secrets = bundle.control_secrets(s)
    if secrets:  # never sent to the host: redacted here, should the host have written one anyway
        python.call(name="Triage bundle redacted of the control machine's secrets", function=_redact, path=local, s=s)


def _redact(path: Path, s: Settings) -> None:
    found = bundle.redact_fetched(path, bundle.control_secrets(s))
    if found:
        logger.warning(f"[{host.name}] triage: {found} control-side secret values found in the bundle, redacted")
