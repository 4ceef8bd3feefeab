"""Fork releases (on demand): the newer releases on the pinned fork line, asked on each host through the
runtime's git cache and git_mirror_prefix (vllm_rig/host/fork_releases.py: `git ls-remote --tags`, the line's
tags fetched into the cache, the pinned commit's release read from the history).

    pyinfra inventory.py tasks/fork_releases.py

Prints, per host, each release of `fork_release_line` with its commit, which one fork_ref is, and for each
newer one the guarded update that tries it (tasks/update_fork.py). Changes nothing but the git cache.
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation

from vllm_rig.core.become import sudo_args
from vllm_rig.core.host_package import answer, host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.known import fork_lines
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import kinds
from vllm_rig.stages.runtime.plan import cache_name


def release_lines(result: dict) -> list[str]:
    """The listing as a person reads it."""
    ref = result["ref"]
    current = result.get("current")
    head = f"fork line {result['line']} at {result['url']}: fork_ref {ref[:12]} is {current or 'no release of it'}"
    lines = [head]
    for r in result["releases"]:
        if r["newer"]:
            what = f"newer: pyinfra inventory.py tasks/update_fork.py --data fork_ref={r['commit']}"
        elif r["newer"] is None:
            what = "newer or not: unknown"
        elif r["tag"] == current:
            what = "what fork_ref is" if r["commit"] == ref else "fork_ref is past it"
        else:
            what = "older"
        lines.append(f"  {r['tag']:<10} {r['commit'][:12]}  {what}")
    newer = [r["tag"] for r in result["releases"] if r["newer"]]
    lines.append(f"newer releases: {', '.join(newer)}" if newer else "no newer release on this line")
    if result.get("error"):
        lines.append(f"note: {result['error']}")
    return lines


def line_notes(s: Settings) -> list[str]:
    """Which line this host's settings are on, and what the fork's newer line would ask of it."""
    lines = kinds.of(s).line_notes(s)
    newer = fork_lines.V0_2
    if kinds.of(s).fork_line(s) == newer.line:
        return lines
    lines += [
        f"the fork's newer line {newer.line}.x ({newer.latest}, not listed below and not built by the rig): "
        f"{newer.base} base, CUDA {newer.cuda}, torch {newer.torch}, Python {newer.python}, GCC {newer.gcc}, "
        f"kernel {newer.kernel}, uv",
        f"  its build.sh asks for {newer.host_check}",
        f"  on Ubuntu 24.04: {newer.ubuntu_2404}",
        f"  source: {fork_lines.SOURCE}",
    ]
    return lines


# Own operation: server.shell shows a command's output only with -v, and cannot read it into lines for the owner.
@operation(is_idempotent=False)
def releases_listed(command: str):
    """Run the listing on the host and print it (read-only apart from the git cache)."""
    yield FunctionCommand(_list, (command,), {})


def _list(state, host, command: str) -> bool:  # noqa: ARG001 - pyinfra passes them
    ok, output = host.run_shell_command(StringCommand(command), **sudo_args(host))
    result = answer(output.stdout_lines, "releases")
    if not result:
        logger.error(f"[{host.name}] fork releases: the listing did not run: {output.stderr.strip()[-300:]}")
        return False
    for line in release_lines(result):
        logger.info(f"[{host.name}] {line}")
    if result.get("error") and not result["releases"]:
        logger.error(f"[{host.name}] fork releases: {result['error']}")
        return False
    return ok or bool(result["releases"])


@deploy("Fork releases")
def fork_releases(s: Settings) -> None:
    if host_failed():
        return
    for line in line_notes(s):
        logger.info(f"[{host.name}] {line}")
    elsewhere = kinds.of(s).not_the_fork(s)
    if elsewhere is not None:
        logger.info(f"[{host.name}] {elsewhere}")
        return
    layout = Layout.of(s)
    host_programs(layout.host_package)
    url = s.git_mirror_prefix + s.fork_repo
    cache = f"{s.install_root}/cache/git/{cache_name(url)}.git"
    argv = [
        "python3",
        layout.host_package,
        "fork_releases",
        "--url",
        url,
        "--line",
        s.fork_release_line,
        "--ref",
        s.fork_ref,
        "--cache",
        cache,
    ]
    releases_listed(name=f"Releases on the fork's {s.fork_release_line} line", command=shlex.join(argv))
