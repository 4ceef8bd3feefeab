"""Service: the system user, the API key, the seed's unit rendered from settings, started, and proven to
generate (a real chat completion with the key, warm-up, known answers) after every change; the unit proves
every start itself (start check) and waits for free GPUs; a timer runs the watchdog.

Restarts only on a change: the unit, the key, or a runtime switched or caches cleared by the runtime stage
since the service started (done here, after the GPU verdict has stopped and started it, so a change
costs one restart of a server that takes minutes to load, not two).
"""

import hashlib
import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server, systemd

from vllm_rig import paths
from vllm_rig.core import heartbeat
from vllm_rig.core.files import config_files, text
from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.core.secrets import Secret, api_key_file, secret_file
from vllm_rig.core.stamp import stamped, with_key_of
from vllm_rig.core.systemd import said_on_failure, unit_enabled_and_started
from vllm_rig.core.users import service_user
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.preflight.host_state import host_state
from vllm_rig.stages.runtime import served_with
from vllm_rig.stages.runtime.operations import restart_if_stale
from vllm_rig.stages.service.unit import (
    environment_file,
    probe_args,
    render_unit,
    server_gone_command,
    watchdog_units,
)


@deploy("Service")
def install_service(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    box = host_state(s.install_root)
    if not box:
        return  # the host's state could not be read: preflight has already failed it
    service_user(layout, box["gpu_groups"])
    key = api_key_file(
        name="API key (made once on the host, root:service 0640)" if s.vllm_api_key == "auto" else "No API key",
        path=layout.env_file,
        group=s.service_user,
        enabled=s.vllm_api_key == "auto",
    )
    # Before the unit that names it; the unit carries its digest, so a change restarts the service.
    secret_file(
        name="The server's environment (root-only 0600; the unit only names it)",
        path=layout.environment_file,
        content=Secret(environment_file(s, layout)),
    )
    unit_text = render_unit(s, layout)
    # The unit's start check and GPU wait, the watchdog and the deploy's probe all run from it.
    host_programs(layout.host_package)
    watchdog_service, watchdog_timer = watchdog_units(s, layout)
    unit = config_files(name=f"Unit {s.service_name}.service from settings", files=(text(layout.unit_path, unit_text),))
    watchdog = config_files(
        name="Watchdog service and timer from settings",
        files=(
            text(f"/etc/systemd/system/{paths.WATCHDOG_UNIT}.service", watchdog_service),
            text(f"/etc/systemd/system/{paths.WATCHDOG_UNIT}.timer", watchdog_timer),
        ),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=lambda: unit.did_change() or watchdog.did_change())
    # Restart first (it acts only on a running service), then start: a first start is never
    # interrupted by a restart while it compiles.
    # systemctl waits for the unit's start check, which gives up after service_start_timeout_s
    starts = (f"Restart {s.service_name} after its unit or key changed", f"{s.service_name} enabled and started")
    for name in (*starts, f"{s.service_name} restarted if it runs an older runtime or cleared caches"):
        heartbeat.bound(host.name, name, s.service_start_timeout_s)
    # A start that fails says why (the server's own error line), at once: the start check gives up on a server
    # that exited instead of waiting out its timeout. Where this run installed the unit or environment that
    # failed, the ones the runtime last served with go back and it serves again: a failed run leaves the box
    # serving (served_with.py; saved after the proof below).
    said = served_with.put_back_command(
        layout.unit_path, layout.environment_file, s.install_root, s.service_name, server_gone_command(s, layout)
    )
    service_unit = f"{s.service_name}.service"
    server.shell(
        name=starts[0],
        # try-restart: only a running service (the GPU verdict leaves it stopped for a new unit); a stopped one
        # is started by the next operation, with the new unit.
        commands=[said_on_failure(f"systemctl try-restart {service_unit}", said)],
        _if=lambda: unit.did_change() or key.did_change(),
    )
    restart_if_stale(
        name=f"{s.service_name} restarted if it runs an older runtime or cleared caches",
        service=s.service_name,
        stamps_loaded=[paths.SWITCHED_STAMP, paths.HOST_FINGERPRINT],
        when_it_fails=said,
    )
    unit_enabled_and_started(name=starts[1], unit=service_unit, when_it_fails=said)
    timer = f"{paths.WATCHDOG_UNIT}.timer"
    if s.watchdog_enabled:
        systemd.service(name="Watchdog timer enabled and started", service=timer, running=True, enabled=True)
    else:
        systemd.service(
            name="Watchdog timer off (watchdog_enabled: false)",
            service=timer,
            running=False,
            enabled=False,
        )
    probe = service_probe_command(s, layout)
    # After a driver change the service restarts on a new kernel module: prove it again.
    fingerprint = hashlib.sha256(f"{unit_text}|driver {s.nvidia_driver_version}".encode()).hexdigest()
    # Proven: these are the unit and environment the runtime serves with, what a failed start puts back.
    saved = served_with.save_command(
        layout.unit_path, layout.environment_file, served_with.current_name_word(s.install_root)
    )
    stamped(
        name="A real chat completion with the key, warm-up, then the known-answer checks",
        command=f"{probe} && {saved}",
        stamp=paths.SERVICE_PROVEN,
        key=with_key_of(fingerprint, paths.SWITCHED_STAMP),
        streamed=True,
    )


def service_probe_command(s: Settings, layout: Layout) -> str:
    """The deploy's proof: every word quoted (served_model_name, install_root reach it)."""
    return shlex.join(
        ["python3", layout.host_package, "service_probe", *probe_args(s, layout), "--unit", f"{s.service_name}.service"]
        + ["--timeout", str(s.service_start_timeout_s), "--needle-words", str(s.start_check_needle_words)]
    )
