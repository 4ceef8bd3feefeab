"""The runtime's requirement set as the build computes it, resolved by pip's real resolver against PyPI.

The set is what vllm_rig/host/runtime_build.py installs on a host: the fork's real requirement files at fork_ref
(../shared/real-sources/fork-requirements/, each with its source line), merged by the build's own
merge_requirements with the spec vllm_rig.runtime.build_spec writes (our exact pins, the per-release
overrides, FlashInfer's line replaced, flashinfer-cubin/-jit-cache dropped).

The resolver: a pinned pip in a venv of the profile's Python (markers such as `python_version > '3.11'`
are evaluated by the running interpreter), `install --dry-run --report` for Ubuntu 24.04 x86_64 wheels
(manylinux up to glibc 2.39), `--isolated` so this machine's pip configuration (local indexes, caps) is
left out and pip's default index is used, and `--use-feature=fast-deps` so wheel metadata is read with
HTTP range requests instead of downloading multi-GB CUDA wheels where the index serves no separate
metadata files.

One difference from a real box, by necessity: the torch lane's local versions (torch 2.11.0+cu128 and its
cu12 NVIDIA libraries) are not on PyPI, so torch, torchvision and torchaudio resolve as PyPI's releases of
the same versions (PyPI's torch 2.11.0 is the CUDA 13.0 build: its nvidia-* dependencies are cu13 ones).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from vllm_rig.host import runtime_build
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import plan as runtime

REPO = Path(__file__).resolve().parents[2]
FORK_REQUIREMENTS = REPO.parent / "shared" / "real-sources" / "fork-requirements"
PIP = "pip==26.3"  # the resolver under test: pinned, so a pip release cannot change the verdict
GLIBC_MINORS = range(39, 16, -1)  # Ubuntu 24.04's glibc 2.39 takes manylinux_2_39 ... manylinux_2_17 wheels
VENVS = Path.home() / ".cache" / "vllm-rig-sandbox" / "resolver"


@dataclass(frozen=True)
class Resolution:
    ok: bool
    installs: dict[str, str]  # normalized name -> version (empty when not ok)
    output: str  # pip's own words: the conflict, when not ok


def build_script() -> ModuleType:
    return runtime_build


def fork_requirement_lines(root: Path = FORK_REQUIREMENTS) -> list[str]:
    """The fork's build then runtime requirements, in the order and with the includes the build reads."""
    rb = build_script()
    lines: list[str] = []
    for path in rb.fork_requirement_files(root):
        lines += rb.requirement_lines(path)
    return lines


def runtime_requirements(s: Settings, fork_lines: list[str] | None = None) -> list[str]:
    """Every requirement the build installs for these settings (the torch lane's packages included)."""
    spec = runtime.build_spec(s, runtime.RuntimeDirs(s.install_root, "resolve"), "0" * 64, {}, 1)
    rb = build_script()
    merged = rb.merge_requirements(
        fork_requirement_lines() if fork_lines is None else fork_lines,
        spec["pins"],
        spec["overrides"],
        spec["replace"],
        spec["drop"],
    )
    lane = [f"{name}=={spec['pins'][name]}" for name in spec["torch_packages"]]
    return lane + merged


def torch_lane_requirements(s: Settings) -> list[str]:
    """What the build's torch step installs from the torch index alone."""
    spec = runtime.build_spec(s, runtime.RuntimeDirs(s.install_root, "resolve"), "0" * 64, {}, 1)
    return [f"{name}=={spec['pins'][name]}" for name in spec["torch_packages"]]


def interpreter(version: str) -> str | None:
    """A python<version> on this machine (PATH, then pyenv's versions), or None."""
    found = shutil.which(f"python{version}")
    if found and _runs(found):
        return found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True):
        if _runs(str(candidate)):
            return str(candidate)
    return None


def _runs(python: str) -> bool:
    return subprocess.run([python, "-c", "import venv"], capture_output=True, check=False).returncode == 0


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def resolver_pip(version: str) -> Path:
    """A venv of Python `version` holding the pinned pip (made once, kept in the cache)."""
    python = interpreter(version)
    if python is None:
        raise LookupError(f"no python{version} on this machine to resolve with")
    venv = VENVS / f"py{version}-{PIP.replace('==', '-')}"
    pip = venv / "bin" / "pip"
    if not pip.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(pip), "install", "--isolated", "-q", PIP], check=True, env=_clean_env())
    return pip


def report(
    requirements: list[str], python_version: str, extra: tuple[str, ...] = ()
) -> tuple[dict[str, Any] | None, str]:
    """pip install --dry-run --report of `requirements` for Python `python_version` on Ubuntu 24.04 x86_64:
    (the report, pip's output); the report is None when pip fails."""
    pip = resolver_pip(python_version)
    platforms = [arg for minor in GLIBC_MINORS for arg in ("--platform", f"manylinux_2_{minor}_x86_64")]
    platforms += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]
    with tempfile.TemporaryDirectory(prefix="vllm-rig-resolve-") as tmp:
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("\n".join(requirements) + "\n")
        path = Path(tmp) / "report.json"
        cmd = [str(pip), "install", "--isolated", "--dry-run", "--ignore-installed", "--use-feature=fast-deps"]
        cmd += ["--only-binary=:all:", *platforms, "--target", str(Path(tmp) / "target"), *extra]
        cmd += ["--report", str(path), "-r", str(reqs)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), check=False)
        if proc.returncode != 0:
            return None, proc.stderr + proc.stdout
        return json.loads(path.read_text()), proc.stdout


def resolve(requirements: list[str], python_version: str) -> Resolution:
    """pip install --dry-run of `requirements` for Python `python_version` on Ubuntu 24.04 x86_64."""
    found, text = report(requirements, python_version)
    if found is None:
        return Resolution(False, {}, text)
    return Resolution(True, installs(found), text)


def installs(report: dict[str, Any]) -> dict[str, str]:
    rb = build_script()
    return {rb.normalize(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
