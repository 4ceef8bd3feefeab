"""Write a hashed lock from the real resolver: the requirement set a build installs (the same spec the deploy
writes, the same merge the host build does), resolved by `uv pip compile --generate-hashes` against the index the
box installs from, every file's sha256 of each pinned version kept.

A lock's first lines say what it is for and the sha256 of its inputs (the requirement set, the indexes' own
fingerprint where a caller has one, uv's version): a lock whose inputs are unchanged is not written again.
"""

from __future__ import annotations

import functools
import hashlib
import html.parser
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from vllm_rig.host import runtime_build
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.locks import Lock, tools_name, tools_what
from vllm_rig.stages.model.start import TOOLS
from vllm_rig.stages.runtime import kinds, plan
from vllm_rig.stages.runtime.kinds.base import DROPPED_PACKAGES

PLATFORM = "x86_64-manylinux_2_39"  # the boxes' Ubuntu 24.04 (glibc 2.39); older manylinux tags fit it too
UV = "uv"  # requirements.txt pins it: a deploy writes a missing lock on first use
HEADER = "# vllm-rig hashed lock for {what}: written by `bin/locks`, do not edit\n"
INPUTS = "# inputs sha256 "
INDEX = "# index fingerprint "  # where the caller has one (a sandbox's own index)


class LockError(Exception):
    """The resolver or a source could not be reached or refused the set: one line why."""


def uv_reason(stderr: str) -> str:
    """uv's own explanation in one line, bounded: its "cause:" derivation is wrapped over lines and starts with the
    package that conflicts, so the whole of it is kept, not its last lines."""
    words = " ".join(stderr.split()).removeprefix("error: ")
    return words if len(words) <= 1200 else words[:1200] + " ..."


@functools.cache
def pypi() -> str:
    """pip's own name for its default index (PyPI): what a box's pip uses when pip_index_url is unset. Asked of
    pip in a child process: importing pip's internals here breaks a later setuptools import (its distutils shim)."""
    code = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout.strip()
    if not said.startswith("https://"):
        raise LockError("pip could not name its default index (PyPI) on this machine: set pip_index_url")
    return said.rstrip("/") + "/"


@dataclass(frozen=True)
class Target:
    name: str  # the lock file's name
    what: str  # for people
    requirements: tuple[str, ...]
    index: str  # the main index (PyPI or its mirror)
    extra_index: str | None  # the torch lane's index, for the compiled kinds


def runtime_target(s: Settings, tree_lines: list[str]) -> Target:
    """What the runtime build installs for `s` (the spec's pins and, for the compiled kinds, the source tree's own
    requirement lines merged with them as the host build merges them), from the indexes the build uses."""
    spec = plan.build_spec(s, RuntimeDirs(s.install_root, "lock"), "0" * 64, {}, 1)
    kind = kinds.of(s)
    reqs = tuple(kind.lock_requirements(spec, tree_lines))
    index = s.pip_index_url or pypi()
    return Target(plan.runtime_lock_name(s), kind.lock_what(s), reqs, index, spec.get("torch_index_url"))


def tools_target(s: Settings) -> Target:
    return Target(tools_name(s), tools_what(s), TOOLS, s.pip_index_url or pypi(), None)


# ---- the source tree's requirement files ------------------------------------------------------------


def tree_lines(tree: Path) -> list[str]:
    """Build then runtime requirement lines of a vLLM tree, as the host build reads them."""
    lines: list[str] = []
    for path in runtime_build.fork_requirement_files(tree):
        lines += runtime_build.requirement_lines(path)
    return lines


def fork_tree(s: Settings, dest: Path) -> Path:
    """The fork at fork_ref (a commit: what git fetched is what the lock is made from)."""
    url = s.git_mirror_prefix + s.fork_repo
    git = ["git", "-C", str(dest)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*git, *args], capture_output=True, text=True, check=False)

    subprocess.run(["git", "init", "-q", str(dest)], capture_output=True, check=False)
    if run("fetch", "-q", "--depth", "1", url, s.fork_ref).returncode != 0:
        run("fetch", "-q", url, "+refs/*:refs/fetched/*")  # a mirror that refuses a fetch by commit
    proc = run("checkout", "-q", s.fork_ref)
    if proc.returncode != 0:
        raise LockError(f"git could not fetch the fork at {s.fork_ref} from {url}: {proc.stderr.strip()[-300:]}")
    head = run("rev-parse", "HEAD").stdout.strip()
    if head != s.fork_ref:
        raise LockError(f"{url} gave commit {head} for fork_ref {s.fork_ref}")
    return dest


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if tag == "a" and k == "href" and v]


def sdist_tree(s: Settings, dest: Path) -> Path:
    """vLLM's source archive from the index's page, checked by the recorded sha256 before it is opened."""
    sdist, index = s.vllm_sdist(), s.pip_index_url or pypi()
    page_url = urllib.parse.urljoin(index if index.endswith("/") else index + "/", "vllm/")
    try:
        with urllib.request.urlopen(page_url, timeout=60) as page:  # noqa: S310 - an http(s) setting
            links = _Links()
            links.feed(page.read().decode())
        # A link's last path segment is the file's name (PyPI's links are absolute, a plain index's relative).
        named = [h for h in links.hrefs if urllib.parse.unquote(h.split("#")[0]).rsplit("/", 1)[-1] == sdist.filename]
        if not named:
            raise LockError(f"{sdist.filename} is not listed on {runtime_build.redact(page_url)}")
        with urllib.request.urlopen(urllib.parse.urljoin(page_url, named[0]), timeout=300) as got:  # noqa: S310
            data = got.read()
    except OSError as err:
        raise LockError(f"{sdist.filename} could not be fetched from {runtime_build.redact(index)}: {err}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != s.vllm_sdist_hash():
        where = runtime_build.redact(index)
        raise LockError(f"{sdist.filename} from {where} has sha256 {digest}, not the recorded {s.vllm_sdist_hash()}")
    top = sdist.filename.removesuffix(".tar.gz")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        wanted = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(f"{top}/requirements/")]
        tar.extractall(dest, members=wanted, filter="data")
    return dest / top


# Each kind's lock_tree: where its requirement files come from.
TREES = {"fork": lambda s, tmp: fork_tree(s, tmp / "fork"), "sdist": sdist_tree}


def source_lines(s: Settings, fork: Path | None = None) -> list[str]:
    """The source tree's requirement lines for a compiled kind ([] for the release wheel)."""
    tree = kinds.of(s).lock_tree
    if tree is None:
        return []
    if fork is not None:
        return tree_lines(fork)
    with tempfile.TemporaryDirectory(prefix="vllm-rig-lock-") as tmp:
        return tree_lines(TREES[tree](s, Path(tmp)))


# ---- the resolver -----------------------------------------------------------------------------------


def uv() -> str:
    beside = Path(sys.executable).with_name("uv")  # the venv's own uv (requirements.txt)
    found = str(beside) if beside.exists() else shutil.which(UV)
    if found is None:
        raise LockError("uv is not installed on this machine: pip install -r requirements.txt")
    return found


def inputs_sha256(t: Target, python: str, platform: str, index_fingerprint: str) -> str:
    version = subprocess.run([uv(), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    parts = [*t.requirements, t.index, t.extra_index or "", python, platform, index_fingerprint, version]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def compile_lock(t: Target, python: str, platform: str) -> str:
    """uv pip compile of the target's set: the body of the lock (every requirement pinned, every file hashed)."""
    with tempfile.TemporaryDirectory(prefix="vllm-rig-lock-") as tmp:
        reqs = Path(tmp) / "requirements.in"
        reqs.write_text("\n".join(t.requirements) + "\n")
        out = Path(tmp) / "lock.txt"
        # --no-python-downloads: without it uv fetches a managed CPython for the target version into the owner's
        # home on every lock it writes (measured: 8-12 s of retries where GitHub is out of reach); it builds any
        # source archive's metadata with the Python it finds instead.
        cmd = [uv(), "pip", "compile", "--no-config", "--no-python-downloads", "--quiet", "--generate-hashes"]
        cmd += ["--no-header", "--no-annotate"]
        cmd += ["--python-version", python, "--python-platform", platform, "--index-url", t.index]
        if t.extra_index:
            # pip on the box takes the best match across both indexes (the torch lane's +cu128 builds win by version)
            cmd += ["--extra-index-url", t.extra_index, "--index-strategy", "unsafe-best-match"]
        for name in DROPPED_PACKAGES:  # never installed on a box (kinds/base.py says why)
            cmd += ["--no-emit-package", name]
        cmd += ["-o", str(out), str(reqs)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise LockError(f"uv could not resolve {t.name}: {uv_reason(proc.stderr)}")
        return out.read_text()


def write(t: Target, out_dir: Path, python: str, platform: str, index_fingerprint: str = "") -> tuple[Lock, bool]:
    """Write the target's lock under out_dir unless its inputs are those of the one there: (the lock, written)."""
    key = inputs_sha256(t, python, platform, index_fingerprint)
    path = out_dir / t.name
    if path.is_file() and f"{INPUTS}{key}\n" in path.read_text():
        return Lock(t.name, path.read_text()), False
    body = compile_lock(t, python, platform)
    index = f"{INDEX}{index_fingerprint}\n" if index_fingerprint else ""
    text = HEADER.format(what=t.what) + f"{INPUTS}{key}\n" + index + body
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return Lock(t.name, text), True
