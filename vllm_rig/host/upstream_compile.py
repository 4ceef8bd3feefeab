"""The upstream kind's compile build (runtime_build.py runs it for a spec whose "kind" is "upstream-compile"):
the first box's own way, vLLM's release compiled for SM75 on the card's CUDA 12.9 with the SM75 patch.

Steps: the venv; the torch index's CUDA 12 lane (the release's torch +cu128: 2.11.0, or 2.13.0 for 0.27.1) as the
fork kind installs it; the release's build requirements; vLLM's source archive through pip with --require-hashes
(pip checks the sha256 before any of its code runs, then prepares its metadata: setup.py runs, so the toolkit and
the arch list are set by then), checked again, every member checked, unpacked beside and renamed into place; zyYuc's
SM75 patch applied to the tree; the tree's requirements with the release's pins on top; FlashInfer's SM75 fix;
FlashQLA with the owner's patch; the compile (`pip install --no-build-isolation --no-deps <tree>`, FetchContent
disconnected, every source the release's CMake fetches checked out ahead); then the checks: the version setup.py
gives a CUDA 12.9 build, the patch in the installed files, the release's extensions imported from a neutral
directory, the FlashInfer check, FlashQLA's extension.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from . import tar_members
from .runtime_build import HASH_MISMATCH, BuildError, output, redact, relane, run, say
from .upstream_build import UpstreamBuild, download_progress, verify_file

COMMIT_ID = re.compile(r"""commit_id\s*=\s*['"]([^'"]*)['"]""")


def sdist_members(tar: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    """The archive's members under `top`/ with that folder stripped, each checked before anything is written
    (tar_members' rules: plain relative names, files, directories and links that stay inside the tree)."""
    members = []
    for m in tar.getmembers():
        if m.name.rstrip("/") == top:
            continue
        if not m.name.startswith(top + "/"):
            raise BuildError(f"the source archive holds {m.name!r}, outside its {top}/ folder: not unpacked")
        m.name = m.name[len(top) + 1 :]
        members.append(m)
    files = {m.name for m in members if m.isreg()}
    links = {m.name: m.linkname for m in members if m.issym()}
    try:
        tar_members.check_members(members, files, links)
    except tar_members.MemberError as err:
        raise BuildError(f"the source archive is refused: {err}") from None
    return members


def unpack_sdist(archive: Path, top: str, tree: Path) -> None:
    """Unpack into a fresh directory beside `tree`, then rename it into place: never half a tree."""
    fresh = tree.with_name(tree.name + ".unpacking")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar_members.unpack(tar, sdist_members(tar, top), fresh)
    except (BuildError, OSError, tarfile.TarError, tar_members.MemberError) as err:
        shutil.rmtree(fresh, ignore_errors=True)
        raise BuildError(f"unpacking {archive.name} failed: {err}") from None
    shutil.rmtree(tree, ignore_errors=True)
    fresh.rename(tree)


class UpstreamCompileBuild(UpstreamBuild):
    PINS_NAME = "the release's own pins"
    STEPS = (
        "venv",
        "torch",
        "build_requirements",
        "source",
        "sm75_patch",
        "requirements",
        "flashinfer",
        "flashqla",
        "compile",
        "check",
    )
    ARTIFACT_REPLACES = STEPS[:-1]

    def release(self) -> str:
        return self.spec["vllm_sdist"]["version"]

    def source_tree(self) -> Path:
        return Path(self.spec["sources"]["vllm"])

    def patch_target(self) -> Path:
        return self.source_tree()

    def index_env(self) -> dict[str, str]:
        return self.pip_env(self.spec["pip_index_url"], self.spec["torch_index_url"])

    def step_torch(self) -> None:
        lane = self.spec["torch_index_url"]
        with download_progress(f"the torch lane ({lane.rstrip('/').rsplit('/', 1)[-1]})", [self.cache / "pip"]):
            super().step_torch()
        say(f"==> check passed: {', '.join(f'{n} {v}' for n, v in self.spec['torch_exact'].items())}")

    def step_build_requirements(self) -> None:
        """What the source archive's setup.py needs before pip can even read its metadata (--no-build-isolation:
        an isolated build would install PyPI's CUDA 13 torch instead of the lane's)."""
        wanted = self.spec["build_requires"]
        self.require_locked(wanted, "the build requirements")
        self.install_locked(self.index_env(), "pip install of the lock (the build requirements in it)")
        self.require_pins(self.spec["torch_packages"])
        say(f"==> check passed: build requirements in the venv ({', '.join(wanted)}), the torch lane unchanged")

    def step_source(self) -> None:
        sdist = self.spec["vllm_sdist"]
        scratch = self.work / "sdist"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        requirement = self.work / "sdist-requirement.txt"
        requirement.write_text(f"vllm=={sdist['version']} --hash=sha256:{sdist['sha256']}\n")
        args = ["download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--require-hashes"]
        env = {**self.compile_env(), **{k: v for k, v in self.index_env().items() if k.startswith("PIP_")}}
        # pip checks the version the metadata step computes against the one it asked for: setup.py would add
        # +cu129 for the card's nvcc and pip would throw the archive out ("inconsistent version"). Only here.
        env["VLLM_VERSION_OVERRIDE"] = sdist["version"]
        with download_progress(f"vLLM {sdist['version']}'s source archive", [scratch]):
            said = self.pip_said([*args, "-d", str(scratch), "-r", str(requirement)], env)
        if said is not None:
            raise BuildError(said)
        archive = scratch / sdist["filename"]
        verify_file(archive, sdist["sha256"], f"vLLM {sdist['version']}'s source archive")
        say(f"==> check passed: {archive.name} matches the known sha256 ({archive.stat().st_size} bytes)")
        unpack_sdist(archive, archive.name.removesuffix(".tar.gz"), self.source_tree())
        shutil.rmtree(scratch, ignore_errors=True)
        version_py = self.source_tree() / "vllm" / "_version.py"
        found = COMMIT_ID.search(version_py.read_text()) if version_py.is_file() else None
        # A prefix of the tag's commit, not a pin: the archive's sha256 above is.
        commit = found[1] if found else "?"
        say(f"==> check passed: unpacked, every member checked (its _version.py names commit {commit})")

    def pip_said(self, args: list[str], env: dict[str, str]) -> str | None:
        """Run pip for the source archive, its output to the log; None when it worked, else the one line why."""
        sdist = self.spec["vllm_sdist"]
        cmd = [str(self.python), "-m", "pip", *args]
        say("$ " + redact(" ".join(cmd)))
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        say((proc.stdout + proc.stderr).rstrip())
        if proc.returncode == 0:
            return None
        if HASH_MISMATCH in proc.stdout + proc.stderr:
            return (
                f"the index's vLLM {sdist['version']} source archive is not the known one (pip: its sha256 is not "
                f"{sdist['sha256']}): a changed or wrong file, refused before any of its code ran; nothing was unpacked"
            )
        code = proc.returncode
        return f"pip could not fetch vLLM {sdist['version']}'s source archive (exit code {code}): the log says why"

    def tree_requirement_lines(self) -> list[str]:
        """The release's lines, with the CUDA 13 extras it names swapped for the lane's (humming-kernels[cu13]
        would bring a second CUDA toolkit, 13.x, beside the CUDA 12 torch)."""
        lines = super().tree_requirement_lines()
        swapped = relane(lines, self.spec["lane_extras"])
        for before, after in zip(lines, swapped, strict=True):
            if before != after:
                say(f"the torch lane's CUDA: {before} -> {after}")
        return swapped

    def step_compile(self) -> None:
        env = self.compile_env()
        say(f"TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']} MAX_JOBS={env['MAX_JOBS']} NVCC_THREADS=1")
        say(f"CUDA_HOME={env['CUDA_HOME']} ({output([env['CUDACXX'], '--version']).splitlines()[-1]})")
        local = [f"{dep['env']}={dep['dir']}" for _, dep in sorted(self.spec["fetchcontent"].items())]
        say(f"FetchContent disconnected (CMAKE_ARGS={env['CMAKE_ARGS']}); local sources: {', '.join(local)}")
        tree = str(self.source_tree())
        run(
            [str(self.python), "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps", tree],
            f"compiling vLLM {self.release()}",
            env={**env, "PIP_CACHE_DIR": str(self.cache / "pip"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )

    def step_check(self) -> None:
        want, got = self.spec["vllm_sdist"]["expected_version"], self.installed("vllm")
        if got != want:
            raise BuildError(f"the installed vLLM is {got or 'missing'}, not the {want} this compile makes")
        say(f"==> check passed: vLLM {got} installed from the compiled tree")
        super().step_check()
