"""Check (on demand, read-only): what the deploy needs of a box before its preflight: SSH (pyinfra has
connected when this runs; a box it cannot reach is its "Could not connect" line), root or passwordless
sudo, and python3 (the host programs run on it). One line each; a box that lacks one fails with the way out
and gets no preflight (whose facts need sudo). tasks/check.py runs the preflight after it.
"""

from __future__ import annotations

from typing import TypedDict

from pyinfra import host, logger, state
from pyinfra.api import deploy

from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.settings import Settings


class ContactState(TypedDict):
    user: str
    uid: int
    sudo: str  # "ok", or what `sudo -n true` said
    python: str | None  # "3.12.3", or None when there is no python3


class Contact(SectionFact[ContactState]):
    """Who the login is, whether sudo works without a password, which python3: asked without sudo."""

    def command(self) -> str:
        return section_command(
            {
                "user": "id -un",
                "uid": "id -u",
                "sudo": "sudo -n true 2>&1 && echo ok",
                "python": "python3 -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])'",
            }
        )

    DEFAULT: ContactState = {"user": "?", "uid": -1, "sudo": "unknown", "python": None}

    def parse(self, sections: Sections) -> ContactState:
        return {
            "user": sections.required("user"),
            "uid": sections.integer("uid"),
            "sudo": "ok" if sections.lines("sudo")[-1:] == ["ok"] else sections.first("sudo") or "no answer",
            "python": sections.first("python"),
        }


def contact_lines(found: ContactState, address: str) -> tuple[list[str], list[str]]:
    """(lines to print, problems that stop this host), each problem with its way out."""
    lines, problems = [f"ssh: connected to {address} as {found['user']}"], []
    if found["uid"] == 0:
        lines.append("root: yes (no sudo needed)")
    elif found["sudo"] == "ok":
        lines.append("sudo: works without a password")
    else:
        lines.append(f"sudo: does not work without a password ({found['sudo']})")
        problems.append(
            f"{found['user']} has no passwordless sudo: on the box run "
            f"`echo '{found['user']} ALL=(ALL) NOPASSWD:ALL' | sudo tee /etc/sudoers.d/{found['user']}`, "
            "or log in as root (ssh_user: root), or run with --use-sudo-password"
        )
    if found["python"]:
        lines.append(f"python3: {found['python']}")
    else:
        lines.append("python3: not found")
        problems.append("the box has no python3: install it there (sudo apt-get install python3)")
    return lines, problems


@deploy("Check")
def first_contact(s: Settings) -> None:  # noqa: ARG001 - a stage takes the host's settings
    found = host.get_fact(Contact, _sudo=False)
    lines, problems = contact_lines(found, str(host.data.get("ssh_hostname") or host.name))
    for line in lines:
        logger.info(f"[{host.name}] check: {line}")
    if problems:
        for problem in problems:
            logger.error(f"[{host.name}] check: {problem}")
        state.failed_hosts.add(state.inventory.get_host(host.name))  # no preflight for it: its facts need sudo
