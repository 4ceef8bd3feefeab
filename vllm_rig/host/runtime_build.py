#!/usr/bin/env python3
"""The fork's runtime build, and the steps every kind's build shares (build_runtime.py runs the one the spec names,
from the spec the deploy wrote: <runtime>/build-spec.json).

Steps: the venv (the distribution's python<X.Y>); torch, torchvision, torchaudio and triton at the torch
lane's exact versions (2.11.0+cu128), from the main index with the torch index as extra (as the fork's
build.sh does); the fork's requirements with ours on top (our exact pins beside
the fork's bounds, FlashInfer and the per-release overrides replacing the fork's lines; flashinfer-jit-cache
and flashinfer-cubin left out); FlashInfer's SM75 fix, each fixed header downloaded whole (raw content at a
commit) and verified by sha256: the installed one must be the known base, the download the known result;
FlashQLA made importable on SM75 as the fork's build.sh does it (its SM90 TileLang imports optional,
the fork's legacy-kernel patches copied in, required where the fork's build uses them); the fork compiled
(TORCH_CUDA_ARCH_LIST, MAX_JOBS, NVCC_THREADS=1, ccache, local CUTLASS and Triton sources and every
other source its CMake would fetch, FetchContent disconnected, `pip install --no-build-isolation
--no-deps -e`); the fork's own tools/validate_runtime_components.py, run as its build.sh runs it; then
the checks: `import vllm._C` (the release kinds: their own extensions) from a neutral directory, the
FlashInfer check script, FlashQLA's extension compiles. Only then is
<runtime>/runtime.json written: the runtime is complete.

A re-run resumes: each finished step leaves <runtime>/.build/<step>.done, and ccache keeps what was
compiled, so a retried compile redoes only what changed. Progress goes to stdout ("==> step" lines, the
build's "[n/m]" lines); <runtime>/.build/status.json says where it is. Index URLs reach pip through its
environment only, so a credential in one is never on a command line or in the log. Python 3.10+ standard
library only.
"""

from __future__ import annotations

import ast
import datetime
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

from . import flashinfer_smem, runtime_artifact

# Where the installed flashinfer-python keeps the headers its JIT compiles (relative to the package).
FLASHINFER_DATA = "data"
FLASHINFER = "flashinfer-python"
DOWNLOAD_TRIES = 3
# The SM75 patches and FlashInfer's fixed headers are each well under 1 MiB (the largest header, prefill.cuh, is
# about 0.2 MiB): an answer past 8 MiB is no such file, and is cut there rather than held or written whole.
SMALL_DOWNLOAD_MAX = 8 * 1024 * 1024
CHUNK = 1 << 16


class BuildError(Exception):
    """A step failed; the message says what and what to do."""


# ---- small helpers ----------------------------------------------------------------------------------


def say(text: str) -> None:
    print(text, flush=True)


def redact(text: str) -> str:
    """Hide user:password@ in URLs before they reach the log."""
    return re.sub(r"(https?://)[^/\s@]+@", r"\1***@", text)


sha256_of = runtime_artifact.file_sha256  # read in pieces: a wheel is hundreds of MiB


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def normalize(name: str) -> str:
    """PEP 503 name normalization: Flashinfer_Python -> flashinfer-python."""
    return re.sub(r"[-_.]+", "-", name).lower()


def run(cmd: list[str], what: str, env: dict[str, str] | None = None, cwd: str | Path | None = None) -> None:
    """Run with output going to the log; a failure is a BuildError saying `what` failed."""
    say("$ " + redact(" ".join(cmd)))
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit code {proc.returncode}); the log above says why")


def output(cmd: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{redact(' '.join(cmd))} failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc.stdout.strip()


# ---- requirements: the fork's, with our pins winning ------------------------------------------------

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_lines(path: Path, seen: set[Path] | None = None) -> list[str]:
    """The requirement lines of a pip requirements file, following -r includes; options dropped (the
    indexes are ours) and comments stripped."""
    seen = set() if seen is None else seen
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    lines: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(-r|--requirement)[\s=]+(\S+)$", line)
        if include:
            lines += requirement_lines(path.parent / include.group(2), seen)
        elif not line.startswith("-"):
            lines.append(line)
    return lines


def requirement_name(line: str) -> str | None:
    match = NAME.match(line)
    return normalize(match.group(1)) if match and "://" not in line.split("@", 1)[0] else None


def merge_requirements(
    fork_lines: list[str], pins: dict[str, str], overrides: dict[str, str], replace: list[str], drop: list[str]
) -> list[str]:
    """The fork's requirements with ours on top. A package in `replace` (FlashInfer, the overrides) or
    `drop` loses the fork's line; every other fork line stays beside our exact pins, so pip's resolver checks
    each pin against the fork's own bound and a pin outside it fails naming both."""
    gone = {normalize(n) for n in [*replace, *drop]}
    kept, seen = [], set()
    for line in fork_lines:
        if requirement_name(line) in gone or line in seen:
            continue
        seen.add(line)
        kept.append(line)
    ours = [f"{name}=={version}" for name, version in pins.items() if normalize(name) not in map(normalize, drop)]
    return kept + ours + [f"{name}{spec}" for name, spec in overrides.items()]


EXTRAS = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\](.*)$")


def relane(lines: list[str], lane_extras: dict[str, dict[str, str]]) -> list[str]:
    """Each line whose package `lane_extras` names, with each extra it lists swapped for the lane's (an empty
    name drops the extra): "humming-kernels[cu13]==0.1.10" -> "humming-kernels[cu12]==0.1.10"."""
    out = []
    for line in lines:
        match = EXTRAS.match(line)
        swap = lane_extras.get(normalize(match.group(1))) if match else None
        if match is None or swap is None:
            out.append(line)
            continue
        extras = [swap.get(e.strip(), e.strip()) for e in match.group(2).split(",")]
        kept = ",".join(e for e in extras if e)
        out.append(f"{match.group(1)}{f'[{kept}]' if kept else ''}{match.group(3)}")
    return out


def fork_requirement_files(fork: Path) -> list[Path]:
    """Build then runtime requirements, as the fork's build.sh installs them (older trees: build.txt)."""
    build = next(
        (p for p in (fork / "requirements/build/cuda.txt", fork / "requirements/build.txt") if p.is_file()), None
    )
    runtime = fork / "requirements/cuda.txt"
    if not runtime.is_file():
        raise BuildError(f"{runtime} is missing: is {fork} the vLLM SM75 fork at a v0.1.x commit?")
    return [p for p in (build, runtime) if p is not None]


# ---- the hashed lock: every install goes through it ----------------------------------------------------

LOCKED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")
HASH_MISMATCH = "DO NOT MATCH THE HASHES"  # pip's --require-hashes refusal, since pip 8
MISMATCHED = re.compile(r"^\s+(\S+==\S+) from (\S+?):?(?: \(from .*)?$")
GOT = re.compile(r"^\s+Got\s+([0-9a-f]{64})")


def lock_blocks(text: str) -> dict[str, str]:
    """Normalized name -> its lock entry (the pin line and its --hash lines)."""
    blocks = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = LOCKED.match(block)
        if match:
            blocks[normalize(match.group(1))] = block.rstrip() + "\n"
    return blocks


def hash_refusal(said: str) -> str | None:
    """pip's --require-hashes refusal in one line naming the package, or None when pip said none."""
    if HASH_MISMATCH not in said:
        return None
    lines = said[said.index(HASH_MISMATCH) :].splitlines()
    which = next((m for m in map(MISMATCHED.match, lines) if m), None)
    got = next((m.group(1) for m in map(GOT.match, lines) if m), "another")
    name = which.group(1) if which else "a package"
    where = f" ({redact(which.group(2).split('#')[0])})" if which else ""
    return (
        f"the index's {name}{where} is not the locked file (its sha256 {got} is none of the lock's): refused "
        "before anything was installed; the runtime that serves is unchanged"
    )


# pip's own marker evaluation (its vendored packaging), run by the build's venv python: the markers are judged for the
# Python and platform the lock was resolved for, with nothing beyond what the venv already holds.
MARKERS = (
    "import json, sys\n"
    "from pip._vendor.packaging.requirements import Requirement\n"
    "reqs = [Requirement(line) for line in json.loads(sys.argv[1])]\n"
    "print(json.dumps([r.marker is None or r.marker.evaluate() for r in reqs]))\n"
)


def uncovered(lines: list[str], text: str) -> list[str]:
    """The requirement lines whose package the lock does not hold (the lock was made from another set)."""
    blocks = lock_blocks(text)
    return [line for line in lines if (name := requirement_name(line)) is not None and name not in blocks]


# ---- FlashInfer's SM75 fix, verified by outcome -----------------------------------------------------


def classify(found: dict[str, str], files: dict[str, dict[str, str]]) -> str:
    """'after' when every header is the known result, 'before' when every one is the known base, else
    'other' (another build, a half-applied patch, or patch data that does not fit this release)."""
    if all(found[p] == sums["after"] for p, sums in files.items()):
        return "after"
    if all(found[p] == sums["before"] for p, sums in files.items()):
        return "before"
    return "other"


def header_hashes(data_dir: Path, files: dict[str, dict[str, str]]) -> dict[str, str]:
    return {p: (sha256_of(data_dir / p) if (data_dir / p).is_file() else "missing") for p in files}


class _TooLarge(Exception):
    pass


def download(url: str, dest: Path, limit: int = SMALL_DOWNLOAD_MAX) -> None:
    """Stream `url` into `dest` (through dest.partial, renamed once whole), at most `limit` bytes: a longer or
    endless answer is cut there with one line and nothing is left behind. The caller checks the file's hash."""
    part = dest.with_name(dest.name + ".partial")
    last: Exception | None = None
    for attempt in range(1, DOWNLOAD_TRIES + 1):
        try:
            got = 0
            with urllib.request.urlopen(url, timeout=60) as response, part.open("wb") as out:  # noqa: S310
                while piece := response.read(CHUNK):
                    got += len(piece)
                    if got > limit:
                        raise _TooLarge
                    out.write(piece)
            os.replace(part, dest)
            return
        except _TooLarge:
            part.unlink(missing_ok=True)
            raise BuildError(
                f"{redact(url)} sent more than {limit} bytes, more than a patch or header can be: cut there, "
                "nothing kept; check git_mirror_prefix / the URL"
            ) from None
        except OSError as err:
            part.unlink(missing_ok=True)
            last = err
            say(f"download attempt {attempt} of {redact(url)} failed: {err}")
            time.sleep(2 * attempt)
    raise BuildError(f"could not download {redact(url)}: {last}; check git_mirror_prefix / the URL")


def fetch_fixed(files: dict[str, dict[str, str]], scratch: Path) -> dict[str, Path]:
    """Download each fixed header (the whole file at a commit) into scratch; return the copies, each
    checked against its known result. The installed headers are not touched here."""
    shutil.rmtree(scratch, ignore_errors=True)
    fetched = {}
    for rel, fixed in files.items():
        dest = scratch / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        say(f"downloading the fixed {rel} from {redact(fixed['url'])}")
        download(fixed["url"], dest)
        got = sha256_of(dest)
        if got != fixed["after"]:
            dest.unlink()
            raise BuildError(
                f"{redact(fixed['url'])} is not the known result for {rel} (sha256 {got}, expected "
                f"{fixed['after']}): a wrong or altered file, or wrong patch data"
            )
        fetched[rel] = dest
    return fetched


def install_patched(patched: dict[str, Path], data_dir: Path) -> None:
    """Move every verified header into place (each replace is atomic; all were verified first)."""
    staged = []
    for rel, path in patched.items():
        target = data_dir / rel
        new = target.with_name(target.name + ".vllm-rig-new")
        shutil.copy2(path, new)
        shutil.copymode(target, new)
        staged.append((new, target))
    for new, target in staged:
        os.replace(new, target)


# ---- FlashQLA on SM75: the SM90 path optional, the fork's legacy-kernel patches ------------------------

# The package __init__ files that import the SM90 TileLang path (it raises on SM70/SM75 and needs tilelang).
FLASHQLA_INITS = ("flash_qla/__init__.py", "flash_qla/ops/__init__.py", "flash_qla/ops/gated_delta_rule/__init__.py")
OPTIONAL_MARK = "# vllm-rig: the SM90 TileLang path is optional on SM70/SM75"
SM90_ERRORS = "(ImportError, ValueError, RuntimeError, OSError)"
# The fork's build.sh copies these over FlashQLA's legacy backend (fork tools/flashqla_sm75_patches/).
FORK_PATCH_DIR = "tools/flashqla_sm75_patches"
FORK_FLASHQLA_PATCHES = {
    "sm_legacy.py": "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py",
    "gdn_forward.cu": "flash_qla/ops/gated_delta_rule/legacy/csrc/gdn_forward.cu",
}


def _imports_sm90(node: ast.stmt) -> bool:
    """`from ...gated_delta_rule.chunk import ...` or `from .gated_delta_rule import ...` (the SM90 API)."""
    if not isinstance(node, ast.ImportFrom):
        return False
    last = (node.module or "").rsplit(".", 1)[-1]
    return last in ("chunk", "gated_delta_rule")


def optional_sm90_imports(source: str) -> str | None:
    """The module with each top-level import of the SM90 path wrapped so that, where it cannot load, its
    names are None (what the fork's build.sh does to FlashQLA's __init__ files); None when nothing to do."""
    if OPTIONAL_MARK in source:
        return None
    tree = ast.parse(source)
    targets = [node for node in tree.body if _imports_sm90(node)]
    if not targets:
        return None
    lines = source.splitlines(keepends=True)
    for node in reversed(targets):
        assert isinstance(node, ast.ImportFrom) and node.end_lineno is not None
        names = [alias.asname or alias.name for alias in node.names]
        original = "".join(lines[node.lineno - 1 : node.end_lineno])
        wrapped = (
            f"try:  {OPTIONAL_MARK}\n{textwrap.indent(original, '    ')}"
            f"except {SM90_ERRORS}:\n    {' = '.join(names)} = None\n"
        )
        lines[node.lineno - 1 : node.end_lineno] = [wrapped]
    return "".join(lines)


def fork_ships_flashqla_patches(fork: Path) -> bool:
    """Whether the fork's own build needs tools/flashqla_sm75_patches: its build.sh names them (v0.1.9 and
    later), or it ships the directory. An older tree has neither; its build.sh copies nothing."""
    build_sh = fork / "build.sh"
    named = build_sh.is_file() and FORK_PATCH_DIR in build_sh.read_text(errors="replace")
    return named or (fork / FORK_PATCH_DIR).is_dir()


def copy_fork_flashqla_patches(flashqla: Path, fork: Path) -> list[str]:
    """Copy the fork's SM75 patch files over FlashQLA's legacy backend, as the fork's build.sh does. Where
    the fork's build uses them each one is required: without them the legacy kernel takes float32 only."""
    if not fork_ships_flashqla_patches(fork):
        return []
    changed = []
    for name, rel in FORK_FLASHQLA_PATCHES.items():
        source, target = fork / FORK_PATCH_DIR / name, flashqla / rel
        if not source.is_file():
            raise BuildError(
                f"the fork's build uses {FORK_PATCH_DIR}/{name}, but {source} is missing: without it FlashQLA's "
                "legacy kernel takes float32 only; set fork_ref to a fork commit that ships it (v0.1.9 or later) "
                "and re-run the deploy"
            )
        if not target.is_file():
            raise BuildError(
                f"{target} is missing, so the fork's {FORK_PATCH_DIR}/{name} has nothing to replace: is "
                "flashqla_ref a FlashQLA-SM70-SM75 commit with the legacy backend?"
            )
        if source.read_bytes() != target.read_bytes():
            shutil.copyfile(source, target)
            changed.append(f"{rel} from the fork's {FORK_PATCH_DIR}")
    return changed


def prepare_flashqla(flashqla: Path, fork: Path) -> list[str]:
    """Make the FlashQLA checkout importable on SM75 the way the fork's build.sh does; returns what changed."""
    changed = copy_fork_flashqla_patches(flashqla, fork)
    for rel in FLASHQLA_INITS:
        path = flashqla / rel
        rewritten = optional_sm90_imports(path.read_text()) if path.is_file() else None
        if rewritten is not None:
            path.write_text(rewritten)
            changed.append(f"{rel}: SM90 imports made optional")
    return changed


# ---- FetchContent: every source the fork's CMake would fetch is local, the compile disconnected ------

# vLLM's setup.py appends CMAKE_ARGS (split on whitespace) to its cmake configure command.
DISCONNECTED = "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"


def fetchcontent_env(deps: dict[str, dict[str, str]], cmake_args: str | None) -> dict[str, str]:
    """Environment for the compile: each FetchContent dependency's local checkout under the variable its
    cmake/external_projects file honours (FLASH_MLA_SRC_DIR, QUTLASS_SRC_DIR, ...), and CMAKE_ARGS with
    FetchContent disconnected, so CMake fails instead of reaching the network. A missing or empty
    checkout is a BuildError naming it."""
    env = {}
    for name, dep in sorted(deps.items()):
        path = Path(dep["dir"])
        if not path.is_dir() or not any(path.iterdir()):
            raise BuildError(
                f"the {name} source the fork's CMake would fetch ({dep['env']}) is missing at {path}: the compile "
                "runs with FetchContent disconnected; re-run the deploy (its git checkouts fetch it)"
            )
        env[dep["env"]] = str(path)
    args = (cmake_args or "").split()
    if DISCONNECTED not in args:
        args.append(DISCONNECTED)
    env["CMAKE_ARGS"] = " ".join(args)
    return env


# ---- the fork's own post-build check (build.sh runs it after the compile) -----------------------------

VALIDATE_SCRIPT = "tools/validate_runtime_components.py"
FAIL_LINE = re.compile(r"^FAIL ([^:\s]+): (.*)$")


def judge_validation(returncode: int, output: str, waived: list[str]) -> list[str]:
    """Judge the fork's validate_runtime_components.py by its exit code and its "FAIL <check>: <detail>"
    lines. Returns the failed checks that are waived (packages the rig never installs); any other failure
    is a BuildError that lists the failed checks."""
    if returncode == 0:
        return []
    failed = [m.groups() for m in map(FAIL_LINE.match, output.splitlines()) if m]
    if not failed:
        tail = " | ".join(output.strip().splitlines()[-5:])
        raise BuildError(f"the fork's {VALIDATE_SCRIPT} exited {returncode} without a FAIL line: {tail}")
    real = [f"{name}: {detail}" for name, detail in failed if name not in waived]
    if real:
        raise BuildError(f"the fork's {VALIDATE_SCRIPT} failed (exit code {returncode}): " + "; ".join(real))
    return [f"{name}: {detail}" for name, detail in failed]


# The compiled extensions imported from a neutral directory (no source tree on the path): torch first, as the
# server loads it before them.
KERNEL_CHECK = (
    "import importlib, sys, torch, vllm\n"
    "print('vllm', vllm.__version__, 'kernels', *(importlib.import_module(m).__file__ for m in sys.argv[1:]))"
)


# ---- the build --------------------------------------------------------------------------------------


class Build:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.dir = Path(spec["runtime"])
        self.work = self.dir / ".build"
        self.work.mkdir(parents=True, exist_ok=True)
        self.venv = self.dir / "venv"
        self.python = self.venv / "bin" / "python"
        self.cache = Path(spec["cache"])
        self.times: dict[str, float] = {}
        self.installed_from: str | None = None

    # -- bookkeeping

    def status(self, state: str, **extra: Any) -> None:
        record = {"state": state, "pid": os.getpid(), "invocation_id": os.environ.get("INVOCATION_ID"), **extra}
        write_atomic(self.work / "status.json", json.dumps(record, indent=1) + "\n")

    def done(self, step: str) -> bool:
        return (self.work / f"{step}.done").is_file()

    def mark(self, step: str) -> None:
        (self.work / f"{step}.done").write_text(self.spec["fingerprint"] + "\n")

    # -- environments

    def pip_env(self, index_url: str | None, extra_index_url: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(
            PIP_CACHE_DIR=str(self.cache / "pip"),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PIP_NO_INPUT="1",
            PIP_PROGRESS_BAR="off",
        )
        if index_url:
            env["PIP_INDEX_URL"] = index_url
        if extra_index_url:
            env["PIP_EXTRA_INDEX_URL"] = extra_index_url
        return env

    def pip(self, args: list[str], env: dict[str, str], what: str) -> None:
        run([str(self.python), "-m", "pip", *args], what, env=env)

    def lock_text(self) -> str:
        lock = self.spec.get("lock")
        if not lock:
            raise BuildError("the build spec holds no hashed lock (locks_dir): nothing is installed by version alone")
        return lock["text"]

    def lock_file(self, names: list[str] | None = None) -> Path:
        """The spec's lock, or only the entries of `names`, as a requirements file beside the build."""
        text = self.lock_text()
        if names is not None:
            blocks = lock_blocks(text)
            missing = [n for n in names if normalize(n) not in blocks]
            if missing:
                raise BuildError(f"the lock {self.spec['lock']['name']} holds no {', '.join(missing)}")
            text = "".join(blocks[normalize(n)] for n in names)
        path = self.work / ("lock.txt" if names is None else f"lock-{'-'.join(map(normalize, names))}.txt")
        path.write_text(text)
        return path

    def pip_locked(self, args: list[str], env: dict[str, str], what: str, names: list[str] | None = None) -> None:
        """pip with the lock (or its entries for `names`) and --require-hashes: a file whose sha256 the lock does
        not hold is refused before anything is installed, in one line naming it."""
        cmd = [str(self.python), "-m", "pip", *args, "--require-hashes", "-r", str(self.lock_file(names))]
        say("$ " + redact(" ".join(cmd)))
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        said = []
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            said.append(line)
            say(line)
        if proc.wait() != 0:
            refusal = hash_refusal("\n".join(said))
            raise BuildError(refusal or f"{what} failed (exit code {proc.returncode}); the log above says why")

    def install_locked(self, env: dict[str, str], what: str) -> None:
        """The whole lock, --no-deps: it is the closure, so pip installs exactly what it names."""
        self.pip_locked(["install", "--no-deps"], env, what)

    def applicable(self, lines: list[str]) -> list[str]:
        """The lines whose environment marker holds in the build's venv: pip skips the others, and the lock,
        resolved for that Python, rightly lacks them (`six; python_version > '3.11'` on 3.11)."""
        marked = [line for line in lines if ";" in line]
        if not marked:
            return lines
        holds = json.loads(output([str(self.python), "-c", MARKERS, json.dumps(marked)]))
        skipped = {line for line, ok in zip(marked, holds, strict=True) if not ok}
        return [line for line in lines if line not in skipped]

    def require_locked(self, lines: list[str], what: str) -> None:
        """Every package `lines` names for this venv is in the lock: one the lock lacks would be installed by
        nobody."""
        lacking = uncovered(self.applicable(lines), self.lock_text())
        if lacking:
            raise BuildError(
                f"{what} names {', '.join(lacking)}, which the lock {self.spec['lock']['name']} does not hold: "
                "the lock was made from another set; run `bin/locks` and deploy again"
            )

    def cuda_env(self) -> dict[str, str]:
        cuda = self.spec["cuda_home"]
        env = dict(os.environ)
        env.update(
            CUDA_HOME=cuda,
            CUDA_PATH=cuda,
            CUDACXX=f"{cuda}/bin/nvcc",
            PATH=f"{cuda}/bin:{self.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        env.pop("PYTHONPATH", None)
        return env

    def installed(self, dist: str) -> str | None:
        code = (
            "import importlib.metadata as m, sys\n"
            "try:\n    print(m.version(sys.argv[1]))\nexcept m.PackageNotFoundError:\n    pass\n"
        )
        return output([str(self.python), "-c", code, dist]) or None

    # -- steps

    def step_venv(self) -> None:
        if self.python.exists():
            # `-m pip --version` loads pip's internals: a venv whose ensurepip was cut short (a reboot or kill
            # while `python -m venv` ran) still imports `pip`, but cannot run it.
            probe = subprocess.run([str(self.python), "-m", "pip", "--version"], check=False)
            if probe.returncode == 0:
                return
            say(f"{self.venv} is broken (its pip does not run); making it again")
            shutil.rmtree(self.venv)
        interpreter = shutil.which(self.spec["python"])
        if interpreter is None:
            raise BuildError(f"{self.spec['python']} is not installed (apt install {self.spec['python']}-venv)")
        run([interpreter, "-m", "venv", str(self.venv)], "making the venv")
        got = output([str(self.python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        if got != self.spec["python_version"]:
            raise BuildError(f"the venv runs Python {got}, python_version is {self.spec['python_version']}")

    def step_torch(self) -> None:
        # As the fork's build.sh: the main index with the torch index as extra (a torch index alone lacks
        # some of torch's dependencies), and the lane's exact local version, so PyPI's build cannot win.
        pins, exact = self.spec["pins"], self.spec.get("torch_exact", {})
        wanted = [f"{name}=={exact.get(name, pins[name])}" for name in self.spec["torch_packages"]]
        self.require_locked(wanted, "the torch lane")
        env = self.pip_env(self.spec["pip_index_url"], self.spec["torch_index_url"])
        # The whole lock now (torch's closure is most of it); the later steps check theirs is in it.
        self.install_locked(env, "pip install of the lock (main index + torch index)")
        self.require_pins(self.spec["torch_packages"])

    def source_tree(self) -> Path:
        """The vLLM tree this build compiles (the fork's checkout)."""
        return Path(self.spec["sources"]["fork"])

    def tree_requirement_lines(self) -> list[str]:
        """The source tree's build then runtime requirement lines, as they are."""
        lines: list[str] = []
        for path in fork_requirement_files(self.source_tree()):
            lines += requirement_lines(path)
        return lines

    def step_requirements(self) -> None:
        lines = self.tree_requirement_lines()
        spec = self.spec
        merged = merge_requirements(lines, spec["pins"], spec["overrides"], spec["replace"], spec["drop"])
        say(f"requirements (the source tree's, ours on top): {', '.join(merged)}")
        self.require_locked(merged, "the source tree's requirements")
        env = self.pip_env(self.spec["pip_index_url"], self.spec["torch_index_url"])
        self.install_locked(env, "pip install of the lock")
        for dist in self.spec["drop"]:
            if self.installed(dist):
                self.pip(["uninstall", "-y", dist], env, f"pip uninstall {dist}")
        self.require_pins(list(self.spec["pins"]))

    def require_pins(self, names: list[str]) -> None:
        """Each pin installed: the exact version (local part too) where the torch lane gives one."""
        exact = self.spec.get("torch_exact", {})
        for name in names:
            got = self.installed(name)
            if name in exact:
                if got != exact[name]:
                    raise BuildError(
                        f"{name} is {got or 'not installed'} in the venv, the torch lane's is {exact[name]}"
                    )
                continue
            want = self.spec["pins"][name]
            if got is None or got.split("+", 1)[0] != want:
                raise BuildError(f"{name} is {got or 'not installed'} in the venv, the pin is {want}")

    def flashinfer_data(self) -> Path:
        code = "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('flashinfer').origin))"
        return Path(output([str(self.python), "-c", code])) / FLASHINFER_DATA

    def step_flashinfer(self) -> None:
        fix = self.spec["flashinfer_fix"]
        version = self.spec["pins"]["flashinfer-python"]
        if fix is None:
            say(f"FlashInfer {version} needs no SM75 fix")
            return
        files = fix["files"]
        data = self.flashinfer_data()
        state = classify(header_hashes(data, files), files)
        if state == "other":
            say(f"FlashInfer {version}'s headers are neither the known base nor the result; reinstalling the wheel")
            env = self.pip_env(self.spec["pip_index_url"], self.spec.get("torch_index_url"))
            self.pip_locked(["install", "--force-reinstall", "--no-deps"], env, "reinstalling FlashInfer", [FLASHINFER])
            found = header_hashes(data, files)
            state = classify(found, files)
            if state == "other":
                detail = "; ".join(
                    f"{p} is {found[p]}, known base {s['before']}, known result {s['after']}" for p, s in files.items()
                )
                raise BuildError(
                    f"flashinfer-python {version} is not the release the {fix['patch']} data describes: {detail}"
                )
        if state == "after":
            say(f"FlashInfer {version} already carries {fix['patch']} (headers verified)")
            return
        try:
            patched = fetch_fixed(files, self.work / "flashinfer-scratch")
        except BuildError as err:
            raise BuildError(
                f"FlashInfer {version}: {fix['patch']}: {err}; the installed headers were not changed"
            ) from None
        install_patched(patched, data)
        if classify(header_hashes(data, files), files) != "after":
            raise BuildError(f"FlashInfer {version}: the patched headers did not land; re-run the deploy")
        shutil.rmtree(self.work / "flashinfer-scratch", ignore_errors=True)
        say(f"FlashInfer {version}: {fix['patch']}'s headers in place, verified by sha256")

    def step_flashqla(self) -> None:
        src = self.spec["sources"]
        changed = prepare_flashqla(Path(src["flashqla"]), Path(src["fork"]))
        say("FlashQLA: " + ("; ".join(changed) if changed else "nothing to adapt"))

    def compile_env(self) -> dict[str, str]:
        spec, src = self.spec, self.spec["sources"]
        jobs = str(spec["max_jobs"])
        env = self.cuda_env()
        env.update(
            TORCH_CUDA_ARCH_LIST=spec["arch_list"],
            MAX_JOBS=jobs,
            CMAKE_BUILD_PARALLEL_LEVEL=jobs,
            NVCC_THREADS="1",
            CMAKE_BUILD_TYPE="Release",
            VLLM_TARGET_DEVICE="cuda",
            VLLM_CUTLASS_SRC_DIR=src["cutlass"],
            TRITON_KERNELS_SRC_DIR=f"{src['triton']}/python/triton_kernels/triton_kernels",
            CCACHE_DIR=str(self.cache / "ccache"),
            CCACHE_NOHASHDIR="true",  # editable builds in per-runtime paths still hit the cache
        )
        env.update(fetchcontent_env(spec.get("fetchcontent", {}), env.get("CMAKE_ARGS")))
        version_file = self.source_tree() / "VERSION"
        if version_file.is_file():
            env["VLLM_VERSION_OVERRIDE"] = version_file.read_text().strip()
        return {k: v for k, v in env.items() if not k.startswith("PIP_INDEX") and not k.startswith("PIP_EXTRA")}

    def step_compile(self) -> None:
        fork = Path(self.spec["sources"]["fork"])
        head = output(["git", "-C", str(fork), "rev-parse", "HEAD"])
        if head != self.spec["fork_ref"]:
            raise BuildError(f"{fork} is at {head}, not the pinned {self.spec['fork_ref']}; re-run the deploy")
        env = self.compile_env()
        say(f"TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']} MAX_JOBS={env['MAX_JOBS']} NVCC_THREADS=1")
        local = [f"{dep['env']}={dep['dir']}" for _, dep in sorted(self.spec.get("fetchcontent", {}).items())]
        say(f"FetchContent disconnected (CMAKE_ARGS={env['CMAKE_ARGS']}); local sources: {', '.join(local) or 'none'}")
        run(
            [str(self.python), "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps", "-e", str(fork)],
            "compiling the fork",
            env={**env, "PIP_CACHE_DIR": str(self.cache / "pip"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )

    def validate_env(self) -> dict[str, str]:
        """The environment the fork's build.sh gives validate_runtime_components.py."""
        spec, src = self.spec, self.spec["sources"]
        env = self.cuda_env()
        env.update(
            TORCH_CUDA_ARCH_LIST=spec["arch_list"],
            PYTHONPATH=src["fork"],
            TORCH_EXTENSIONS_DIR=str(self.work / "validate_torch_extensions"),
            VLLM_CUTLASS_SRC_DIR=src["cutlass"],
            TRITON_KERNELS_SRC_DIR=f"{src['triton']}/python/triton_kernels/triton_kernels",
            FLASHQLA_DIR=src["flashqla"],
        )
        return env

    def step_validate(self) -> None:
        """The fork's post-build check, run as its build.sh runs it: the venv's python, no arguments, from
        the fork's root; "built" means it passes (checks of packages the rig never installs are waived)."""
        fork = Path(self.spec["sources"]["fork"])
        script = fork / VALIDATE_SCRIPT
        if not script.is_file():
            say(f"the fork has no {VALIDATE_SCRIPT} (an older tree): nothing to run")
            return
        say(f"$ {self.python} {script}")
        proc = subprocess.run(
            [str(self.python), str(script)],
            cwd=fork,
            env=self.validate_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        say(proc.stdout.rstrip())
        waived = judge_validation(proc.returncode, proc.stdout, self.spec.get("validate_waive", []))
        if waived:
            say("the fork's check passed except for what the rig never installs (waived): " + "; ".join(waived))
        shutil.rmtree(self.work / "validate_torch_extensions", ignore_errors=True)

    def step_check(self) -> None:
        modules = self.spec.get("kernel_modules", ["vllm._C"])
        neutral = tempfile.mkdtemp(prefix="vllm-rig-check-")
        try:
            say(output([str(self.python), "-c", KERNEL_CHECK, *modules], env=self.cuda_env(), cwd=neutral))
        except BuildError as err:
            names = ", ".join(modules)
            raise BuildError(f"import {names} failed from a neutral directory (no kernels were built): {err}") from None
        finally:
            shutil.rmtree(neutral, ignore_errors=True)
        run(["bash", self.spec["check_script"], str(self.python)], "the FlashInfer SM75 check")
        self.check_flashinfer_smem()
        self.check_flashinfer_import()
        self.check_flashqla()

    SMEM_RECORD = "flashinfer-smem.json"  # in .build/: a resumed build that skips the check still records it

    def check_flashinfer_smem(self) -> None:
        """FlashInfer's head-dim-256 prefill tile, compiled from the installed headers with the runtime's nvcc,
        fits SM75's 65,536 B for the KV cache served; what was proven goes into runtime.json (finish), where
        the service's start check compares the installed prefill.cuh and version with it."""
        kv = flashinfer_smem.kv_kind(self.spec.get("kv_cache_dtype", "auto"))
        fix = self.spec.get("flashinfer_fix")
        exact = fix is not None and fix["patch"] == "pr3621"  # PR 3621 sizes its tile from sizeof samples
        nvcc = Path(self.spec["cuda_home"]) / "bin" / "nvcc"
        try:
            installed, sizes = flashinfer_smem.probe(self.python, nvcc, env=self.cuda_env())
        except flashinfer_smem.ProbeError as err:
            raise BuildError(f"FlashInfer's SM75 shared-memory probe: {err}") from None
        failed = flashinfer_smem.verdict(installed.version, sizes, kv, exact)
        if failed is not None:
            raise BuildError(failed)
        record = flashinfer_smem.record(installed, sizes, kv, exact)
        write_atomic(self.work / self.SMEM_RECORD, json.dumps(record, sort_keys=True) + "\n")
        say(f"==> check passed: {flashinfer_smem.ok_line(installed.version, sizes, kv, exact)}")

    def check_flashinfer_import(self) -> None:
        """`import flashinfer` with the packages flashinfer_requirement_overrides moved in place: it imports
        `cutlass` (nvidia-cutlass-dsl) at import time, and only an ImportError there is passed over."""
        moved = ", ".join(f"{n} {self.installed(n) or 'not installed'}" for n in self.spec.get("overrides", {}))
        code = "import sys, flashinfer; print(flashinfer.__version__, 'cutlass' in sys.modules)"
        neutral = tempfile.mkdtemp(prefix="vllm-rig-check-")
        try:
            version, cutlass = output([str(self.python), "-c", code], env=self.cuda_env(), cwd=neutral).split()[-2:]
        except BuildError as err:
            last = str(err).strip().splitlines()[-1]  # the exception line of the traceback
            raise BuildError(f"import flashinfer failed beside {moved or self.PINS_NAME}: {last}") from None
        finally:
            shutil.rmtree(neutral, ignore_errors=True)
        said = "imported cutlass" if cutlass == "True" else "found no cutlass to import"
        say(f"FlashInfer {version} imports ({said}) beside {moved or self.PINS_NAME}")

    def check_flashqla(self) -> None:
        """FlashQLA's extension compiles with this torch and toolkit (into a scratch directory: the service's
        own build happens through `current` after the switch, so its paths match the service's)."""
        scratch = self.work / "torch_extensions"
        env = self.cuda_env()
        env.update(PYTHONPATH=self.spec["sources"]["flashqla"], TORCH_EXTENSIONS_DIR=str(scratch))
        code = "from flash_qla.ops.gated_delta_rule.legacy import sm_legacy; print('FlashQLA', sm_legacy._load_ext())"
        try:
            say(output([str(self.python), "-c", code], env=env, cwd=self.dir))
        except BuildError as err:
            raise BuildError(f"FlashQLA's SM70/SM75 extension does not build: {err}") from None
        shutil.rmtree(scratch, ignore_errors=True)

    def finish(self) -> None:
        versions = {name: self.installed(name) for name in [*self.spec["pins"], "vllm"]}
        nvcc = subprocess.run([f"{self.spec['cuda_home']}/bin/nvcc", "--version"], capture_output=True, text=True)
        release = [line for line in nvcc.stdout.splitlines() if "release" in line]
        record = {
            "name": self.spec["name"],
            "fingerprint": self.spec["fingerprint"],
            "inputs": self.spec["inputs"],
            "built_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "invocation_id": os.environ.get("INVOCATION_ID"),
            "max_jobs": self.spec["max_jobs"],
            "nvcc": release[-1].strip() if release else None,
            "versions": versions,
            "seconds": self.times,
            "installed_from_artifact": self.installed_from,
        }
        smem = self.work / self.SMEM_RECORD
        if smem.is_file():
            record["flashinfer_smem"] = json.loads(smem.read_text())
        write_atomic(self.dir / "runtime.json", json.dumps(record, indent=1, sort_keys=True) + "\n")

    # -- driver

    PINS_NAME = "the fork pins"  # what the FlashInfer import check names beside its packages

    STEPS: tuple[str, ...] = ("venv", "torch", "requirements", "flashinfer", "flashqla", "compile", "validate", "check")

    # Steps an installed artifact replaces; validate and check run after it as after a compile.
    ARTIFACT_REPLACES: tuple[str, ...] = ("venv", "torch", "requirements", "flashinfer", "flashqla", "compile")

    def artifact_store(self) -> Path | None:
        artifact = self.spec.get("artifact") or {}
        return Path(artifact["dir"]) if artifact.get("dir") else None

    def from_artifact(self) -> None:
        """Install the fingerprint's artifact instead of compiling when the deploy put one in the store;
        a missing, partial or corrupt one is one line, then the build goes on as if there were none."""
        store, fp = self.artifact_store(), self.spec["fingerprint"]
        if store is None or not self.spec["artifact"].get("use") or any(self.done(s) for s in self.ARTIFACT_REPLACES):
            return
        if not (store / runtime_artifact.manifest_name(fp)).is_file():
            return  # none was offered: the deploy has said so
        started = time.monotonic()
        try:
            manifest = runtime_artifact.install(self.dir, fp, store)
        except (runtime_artifact.ArtifactError, OSError, EOFError, tarfile.TarError) as err:
            say(f"artifact {fp[:16]} not used: {err}; building instead")
            runtime_artifact.discard_unpacked(self.dir)
            return
        finally:
            runtime_artifact.remove(store, fp)  # the host keeps no second copy of a runtime
        for step in self.ARTIFACT_REPLACES:
            self.mark(step)
        self.times["artifact"] = round(time.monotonic() - started, 1)
        self.installed_from = fp
        say(f"installed from artifact {fp} ({len(manifest['files'])} files verified by sha256), no compile")

    def pack_artifact(self) -> None:
        """After a build that compiled: pack it for the other hosts of this fingerprint (the deploy fetches it
        to the store). A failure to pack costs this host nothing: one line."""
        store = self.artifact_store()
        if store is None or not self.spec["artifact"].get("pack") or self.installed_from:
            return
        try:
            manifest = runtime_artifact.pack(self.dir, self.spec["fingerprint"], store)
        except OSError as err:
            say(f"packing the artifact failed ({err}); other hosts will build")
            return
        count, size = len(manifest["files"]), manifest["archive_bytes"]
        say(f"packed artifact {self.spec['fingerprint'][:16]}: {count} files, {size} bytes")

    def run(self) -> None:
        total = len(self.STEPS)
        self.from_artifact()
        for number, step in enumerate(self.STEPS, start=1):
            if self.done(step):
                say(f"==> step {number}/{total}: {step} (done before)")
                continue
            say(f"==> step {number}/{total}: {step}")
            self.status("running", step=step)
            started = time.monotonic()
            try:
                getattr(self, f"step_{step}")()
            except BuildError as err:
                raise BuildError(f"step {step}: {err}") from None
            self.times[step] = round(time.monotonic() - started, 1)
            self.mark(step)
        self.finish()
        self.pack_artifact()
