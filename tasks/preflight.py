"""Preflight: every read-only check before anything changes, one verdict per host.

A failing host stops here with the reason and the way out; the others carry on. The verdict is a
table in the output, or one JSON line with `--data preflight_report=json`.
"""

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import python

from vllm_rig import preflight
from vllm_rig.context import host_state, settings
from vllm_rig.facts.nvidia_smi import NvidiaGpus, NvidiaTopology


def _stop(state, host, summary: str) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    """Fail this host with one readable line (returning False fails the operation without a traceback)."""
    logger.error(f"[{host.name}] {summary}")
    return False


@deploy("Preflight")
def check_host() -> None:
    s = settings()
    state = host_state()
    gpus = host.get_fact(NvidiaGpus)
    topo = host.get_fact(NvidiaTopology) if gpus and gpus["rc"] == 0 and s.gpu_count > 1 else None
    checks = preflight.verdict(state, gpus, topo, s)
    report = preflight.render_json if s.preflight_report == "json" else preflight.render_table
    logger.info(report(host.name, checks))
    if preflight.has_failures(checks):
        failed = "; ".join(f"{c.name}: {c.detail} -> {c.way_out}" for c in checks if c.status == "fail")
        python.call(name="Preflight verdict: FAIL", function=_stop, summary=f"preflight failed: {failed}")


check_host()
