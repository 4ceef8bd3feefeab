"""Small configuration files, several per operation, checked with one remote command.

Own operation, kept by measurement: pyinfra's files.put/files.template read each file three times on every run
(stat its directory, stat it, hash it). The whole deploy's no-op re-run on the sandbox puts 22 files through 15
of these operations; with files.put per file it ran 53 more remote commands (72 -> 128 with the units and the
directories also stock, `benchmarks/noop.py`), at 65 ms each above pyinfra's floor there: about 3.4 s more than
the 5.6 s run. Here a group of files is one operation and one FilesState fact; only changed files are uploaded.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TypedDict

import jinja2
from pyinfra import host
from pyinfra.api import FileUploadCommand, operation

from vllm_rig.core.facts import SectionFact, Sections, section_command

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"  # templates/<stage>/<name>.j2: every template the deploy renders
SHIPPED = REPO / "files"  # files/<stage>/<name>: every file shipped to hosts as it is


def repo_file(kind: str, name: str) -> Path:
    """The one way a stage finds its template ("template", "service/vllm.service.j2") or a file it ships to
    hosts ("shipped", "driver/vllm-rig-gpu-guard.sh"): the user's layout keeps both at the top level, by stage."""
    base = {"template": TEMPLATES, "shipped": SHIPPED}[kind]
    path = base / name
    if not path.is_file():
        raise FileNotFoundError(f"no {kind} {name} under {base.relative_to(REPO)}/")
    return path


@dataclass(frozen=True)
class ConfigFile:
    dest: str
    content: bytes
    mode: str = "644"  # octal, as stat %a prints it
    user: str = "root"
    group: str = "root"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


def text(dest: str, content: str, mode: str = "644") -> ConfigFile:
    return ConfigFile(dest, content.encode(), mode)


def shipped(dest: str, name: str, mode: str = "644") -> ConfigFile:
    """A file of files/<stage>/ (e.g. "driver/vllm-rig-gpu-guard.sh"), uploaded as is."""
    return ConfigFile(dest, repo_file("shipped", name).read_bytes(), mode)


def render_template(name: str, **variables: Any) -> str:
    """A template of templates/<stage>/ (e.g. "service/vllm.service.j2") rendered here; a variable the
    template uses and the caller did not give is an error, never an empty string."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    return env.from_string(repo_file("template", name).read_text()).render(**variables)


def rendered(dest: str, template: str, mode: str = "644", **variables: Any) -> ConfigFile:
    """A template of templates/<stage>/ rendered into a file for the host."""
    return ConfigFile(dest, render_template(template, **variables).encode(), mode)


@operation()
def config_files(files: tuple[ConfigFile, ...]):
    """Each file with exactly this content, mode and owner; uploads only what differs."""
    current = host.get_fact(FilesState, paths=tuple(f.dest for f in files))
    stale = [f for f in files if _differs(f, current.get(f.dest))]
    if not stale:
        host.noop(f"{len(files)} file(s) up to date")
        return
    directories = sorted({f.dest.rsplit("/", 1)[0] for f in stale})
    yield "mkdir -p " + " ".join(shlex.quote(d) for d in directories)
    for f in stale:
        yield FileUploadCommand(BytesIO(f.content), f.dest, remote_temp_filename=host.get_temp_filename(f.dest))
        yield f"chown {f.user}:{f.group} {shlex.quote(f.dest)} && chmod {f.mode} {shlex.quote(f.dest)}"


def _differs(wanted: ConfigFile, found: FileState | None) -> bool:
    if found is None:
        return True
    return (found["sha256"], found["mode"], found["user"], found["group"]) != (
        wanted.sha256,
        wanted.mode,
        wanted.user,
        wanted.group,
    )


class FileState(TypedDict):
    sha256: str
    mode: str  # octal, as stat %a prints it
    user: str
    group: str


# Many files' state in one remote command: sha256, mode, owner (None where missing).
class FilesState(SectionFact[dict[str, FileState | None]]):
    DEFAULT: dict[str, FileState | None] = {}

    def command(self, paths: tuple[str, ...]) -> str:
        # One line per path: "<path>\t<sha256>\t<mode> <user> <group>", or "<path>\t-" when missing.
        args = " ".join(shlex.quote(p) for p in paths)
        return section_command(
            {
                "files": (
                    f'for p in {args}; do if [ -f "$p" ]; then '
                    'printf "%s\\t%s\\t%s\\n" "$p" "$(sha256sum "$p" | cut -d" " -f1)" "$(stat -c "%a %U %G" "$p")"; '
                    'else printf "%s\\t-\\n" "$p"; fi; done'
                )
            }
        )

    def parse(self, sections: Sections) -> dict[str, FileState | None]:
        state: dict[str, FileState | None] = {}
        for line in sections.lines("files"):
            parts = line.split("\t")
            if len(parts) == 2 and parts[1] == "-":
                state[parts[0]] = None
            elif len(parts) == 3 and len(parts[2].split()) == 3:
                mode, user, group = parts[2].split()
                state[parts[0]] = {"sha256": parts[1], "mode": mode, "user": user, "group": group}
            else:
                sections.unreadable("files", line)
        return state
