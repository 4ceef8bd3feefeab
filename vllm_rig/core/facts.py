"""Building blocks for facts: one remote command per fact, sections marked by `@@name` lines, and small
facts every stage reads (a file's text, the boot id)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


def split_sections(output: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output:
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line)
    return sections


def first_line(lines: list[str] | None) -> str | None:
    return next((line.strip() for line in lines or [] if line.strip()), None)


class BootId(FactBase):
    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    def process(self, output: list[str]) -> str:
        return output[0].strip()


class FileText(FactBase):
    """A small file's text, or None when it does not exist (stamps, markers)."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return "\n".join(output) if output else None

    @staticmethod
    def default() -> None:
        return None
