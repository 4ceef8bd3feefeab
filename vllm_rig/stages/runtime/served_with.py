"""The unit a runtime served with, kept beside it: `current` leaving a runtime saves the service's unit and its
root-only environment file under served-with/<name>/, and a rollback to that runtime puts them back. The unit is
rendered for one runtime kind (the upstream kind's --reasoning-config budget and --device-ids, which the fork
refuses, and each kind's CUDA_HOME), so a rollback across kinds restarting the old runtime with the new unit would
start a server that exits at once. Shell only: the switch operation and the rollback script both run these.
"""

from __future__ import annotations

import shlex

from vllm_rig.paths import SERVED_WITH_DIR, rollback_script

UNIT, ENVIRONMENT = "unit", "environment"


def saved_dir(name_word: str, top: str = SERVED_WITH_DIR) -> str:
    """served-with/<name>: `name_word` is one shell word already (a quoted name or "$var")."""
    return f"{shlex.quote(top)}/{name_word}"


def save_command(unit_path: str, environment_file: str, name_word: str, top: str = SERVED_WITH_DIR) -> str:
    """Copy the unit and environment file on the box (modes and owner kept: the environment is root-only) to the
    saved place of runtime `name_word`; nothing when no unit is installed yet (a first deploy)."""
    unit, env, saved = shlex.quote(unit_path), shlex.quote(environment_file), saved_dir(name_word, top)
    return (
        f"if [ -f {unit} ]; then mkdir -p -m 700 {shlex.quote(top)} {saved}"
        f" && cp -p {unit} {saved}/{UNIT} && {{ [ ! -f {env} ] || cp -p {env} {saved}/{ENVIRONMENT}; }}; fi"
    )


def restore_command(unit_path: str, environment_file: str, name_word: str, top: str = SERVED_WITH_DIR) -> str:
    """Put the saved unit and environment file of runtime `name_word` in place (each by an atomic rename) and
    reload systemd; exits 1 with nothing changed when none was saved (the caller says so)."""
    unit, env, saved = shlex.quote(unit_path), shlex.quote(environment_file), saved_dir(name_word, top)
    put_env = f"cp -p {saved}/{ENVIRONMENT} {env}.new && mv -T {env}.new {env}"
    return (
        f"[ -f {saved}/{UNIT} ] && {{ [ ! -f {saved}/{ENVIRONMENT} ] || {{ {put_env}; }}; }}"
        f" && cp -p {saved}/{UNIT} {unit}.new && mv -T {unit}.new {unit} && systemctl daemon-reload"
    )


def forget_command(names: list[str]) -> str:
    """Remove what was saved for runtimes that are gone."""
    return "rm -rf " + " ".join(saved_dir(shlex.quote(n)) for n in names)


def current_name_word(root: str) -> str:
    """The runtime `current` names, as one shell word (its directory's name under runtimes/)."""
    return f'"$(basename "$(readlink {shlex.quote(root + "/current")})")"'


def put_back_command(
    unit_path: str, environment_file: str, root: str, service: str, said: str, top: str = SERVED_WITH_DIR
) -> str:
    """After a start or restart of `service` that failed: `said` (the one line on why, the server's own words),
    and where this run installed another unit or environment than the ones the runtime `current` last served
    with, those put back, the service restarted (its start check proves it) and the line says so. Where
    `current` never served (this run switched to it), the rollback script returns to `previous` with the unit
    and environment that one served with, and the service is started and proven there: a failed run leaves the
    last good runtime serving. The runtime left is not marked rolled back (its settings failed, not it) and keeps
    nothing saved, so the next deploy with a fixed setting switches to it again. It stays as it is (down) when
    nothing was saved or the saved ones are what failed. One line either way; the caller fails the host after
    it."""
    unit, env, saved = shlex.quote(unit_path), shlex.quote(environment_file), saved_dir('"$name"', top)
    unit_file = shlex.quote(f"{service}.service")
    same = (
        f"cmp -s {saved}/{UNIT} {unit} && {{ [ ! -f {saved}/{ENVIRONMENT} ] || cmp -s {saved}/{ENVIRONMENT} {env}; }}"
    )
    restored = restore_command(unit_path, environment_file, '"$name"', top)
    serves = (
        "the unit and environment runtime $name last served with are back and serve again (start check passed);"
        " change the setting the server refused, then deploy again"
    )
    failed_too = "the settings runtime $name last served with were put back but did not start either"
    rollback, previous = shlex.quote(rollback_script(root)), shlex.quote(f"{root}/previous")
    back_dir = saved_dir('"$back"', top)
    back_saved = f"{back_dir}/{UNIT}"
    runtimes = shlex.quote(root + "/runtimes")
    left = f'{runtimes}/"$name"'
    rolled_back = (
        "runtime $name never served: rolled back to runtime $back, which serves again with the unit and"
        " environment it served with (start check passed); change the setting the server refused, then deploy"
        " again (it switches to $name again)"
    )
    rollback_failed = "runtime $name never served, and rolling back to runtime $back did not start either"
    return (
        f"why=$({said}); name={current_name_word(root)}; "
        f'back="$(basename "$(readlink {previous})")"; '
        f"if [ -f {saved}/{UNIT} ] && ! {{ {same}; }}; then "
        f'if {{ {restored}; }} && systemctl restart {unit_file}; then echo "$why; {serves}"; '
        f'else echo "$why; {failed_too}: $({said})"; fi; '
        f"elif [ ! -f {saved}/{UNIT} ] && [ -x {rollback} ] && [ -f {back_saved} ]; then "
        f"if {rollback} >/dev/null 2>&1 && rm -rf {saved} {left}/rolled-back"
        f" && {{ systemctl is-active -q {unit_file} || systemctl restart {unit_file}; }}; then "
        f'echo "$why; {rolled_back}"; else echo "$why; {rollback_failed}: $({said})"; fi; '
        f'else echo "$why"; fi'
    )
