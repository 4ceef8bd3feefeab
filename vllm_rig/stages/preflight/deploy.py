"""Preflight: every read-only check before anything changes, one verdict per host.

A failing host stops here with the reason and the way out; the others carry on. The verdict is a
table in the output, or one JSON line with `--data preflight_report=json`.
"""

from pyinfra import host, logger
from pyinfra import state as run_state
from pyinfra.api import deploy

from vllm_rig.core.checks import require
from vllm_rig.settings import Settings
from vllm_rig.stages.model.facts import ModelPreflight, preflight_stdin
from vllm_rig.stages.preflight import checks as preflight
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus, reader_stdin
from vllm_rig.stages.preflight.host_state import host_state


def preflight_checks(s: Settings) -> list[preflight.Check]:
    """The verdict's checks for the current host (read-only; the triage bundle records them too)."""
    state = host_state(s.install_root)
    gpus = host.get_fact(NvidiaGpus, _stdin=reader_stdin())
    model = host.get_fact(
        ModelPreflight,
        endpoint=s.hf_endpoint,
        repo=s.model_repo,
        revision=s.model_revision,
        dest=s.model_dir,
        _stdin=preflight_stdin(s.hf_token),  # the checker and the token go on stdin, never on a command line
    )
    return preflight.verdict(state, gpus, s, model=model)


@deploy("Preflight")
def check_host(s: Settings) -> None:
    checks = preflight_checks(s)
    report = preflight.render_json if s.preflight_report == "json" else preflight.render_table
    logger.info(report(host.name, checks))
    if preflight.has_failures(checks):
        failed = "; ".join(f"{c.name}: {c.detail} -> {c.way_out}" for c in checks if c.status == "fail")
        require(name="Preflight verdict: FAIL", problem=lambda: f"preflight failed: {failed}")
        # The verdict is known now, while the run is planned: a --dry run (which executes nothing, so the
        # check above never runs) still ends non-zero for this host, as the real run would.
        run_state.failed_hosts.add(run_state.inventory.get_host(host.name))
