"""The upstream runtime kind's build: vLLM's release wheel, patched, no compile (runtime_build.py runs it
for a spec whose "kind" is "upstream-wheel").

Steps: the venv; vLLM's wheel downloaded on its own and checked against PyPI's sha256 before pip installs
it with the release's exact torch and FlashInfer pins; the CUDA 13.0 toolkit parts torch pins
(cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]) for what compiles on the box; zyYuc's SM75 patch, its sha256
checked, applied to the installed Python files (each file that does not apply named); FlashInfer's SM75
fix (runtime_build's step); FlashQLA with the owner's patch, kept off the resolver (the service's
PYTHONPATH); then the checks: the patch in place, the release's extensions imported from a neutral directory, the
FlashInfer check, FlashQLA's extension compiles.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .runtime_build import Build, BuildError, download, output, redact, say, sha256_of

PATCHED_FILE = re.compile(r"^diff --git a/(\S+) b/\S+$", re.M)
PROGRESS_S = 15.0  # a "==> " line at least this often while pip downloads (the deploy shows those lines)


def tree_bytes(roots: list[Path]) -> int:
    total = 0
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(folder, name)).st_size
    return total


@contextlib.contextmanager
def download_progress(what: str, roots: list[Path], every_s: float = PROGRESS_S) -> Iterator[None]:
    """While the block runs, a line every `every_s`: what, megabytes fetched so far (how much `roots`, pip's
    cache and the download directory, grew), the rate and the time elapsed."""
    start, started = tree_bytes(roots), time.monotonic()
    done = threading.Event()

    def line() -> str:
        got, elapsed = tree_bytes(roots) - start, time.monotonic() - started
        rate = got / elapsed / 1e6 if elapsed > 0 else 0.0
        return (
            f"==> {what}: {got / 1e6:.1f} MB fetched ({rate:.1f} MB/s), {int(elapsed) // 60}m{int(elapsed) % 60:02d}s"
        )

    def tick() -> None:
        while not done.wait(every_s):
            say(line())

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        say(line())


def patched_files(patch: Path) -> list[str]:
    """The files a git diff changes, in its order."""
    return PATCHED_FILE.findall(patch.read_text(errors="replace"))


def verify_file(path: Path, sha256: str, what: str) -> None:
    if not path.is_file():
        raise BuildError(f"{what} is missing ({path}); re-run the deploy to fetch it again")
    got = sha256_of(path)
    if got != sha256:
        raise BuildError(f"{what} ({path}) has sha256 {got}, not the known {sha256}: not applied, nothing changed")


def git_apply(target: Path, patch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`git apply` as a patch tool in `target`: no repository above it is looked up."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(target.parent)}
    cmd = ["git", "apply", *args, str(patch)]
    return subprocess.run(cmd, cwd=target, env=env, capture_output=True, text=True, check=False)


def apply_patch(target: Path, patch: Path, what: str) -> str:
    """Apply `patch` in `target` once: "applied", or "already applied"; BuildError naming each file that
    does not apply (and git's reason) otherwise, with nothing changed."""
    if git_apply(target, patch, "--reverse", "--check").returncode == 0:
        return "already applied"
    if git_apply(target, patch, "--check").returncode != 0:
        failing = []
        for name in patched_files(patch):
            result = git_apply(target, patch, "--check", f"--include={name}")
            if result.returncode != 0:
                reason = (result.stderr.strip().splitlines() or ["does not apply"])[-1]
                failing.append(f"{name} ({reason})")
        raise BuildError(f"{what} does not apply to {', '.join(failing) or target}; nothing was changed")
    result = git_apply(target, patch)
    if result.returncode != 0:
        raise BuildError(f"{what}: git apply failed after its check passed: {result.stderr.strip()}")
    return "applied"


class UpstreamBuild(Build):
    PINS_NAME = "the release's own pins"
    STEPS: tuple[str, ...] = ("venv", "vllm", "cuda_toolkit", "sm75_patch", "flashinfer", "flashqla", "check")
    ARTIFACT_REPLACES: tuple[str, ...] = ("venv", "vllm", "cuda_toolkit", "sm75_patch", "flashinfer", "flashqla")

    def site_packages(self) -> Path:
        return Path(output([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))

    def step_vllm(self) -> None:
        wheel = self.spec["vllm_wheel"]
        scratch = self.work / "wheel"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        env = self.pip_env(self.spec["pip_index_url"])
        args = ["download", "--no-deps", "--only-binary=:all:", "-d", str(scratch)]
        with download_progress(f"vLLM {wheel['version']}'s wheel", [scratch]):
            self.pip_locked(args, env, f"downloading vLLM {wheel['version']}'s release wheel", ["vllm"])
        found = sorted(scratch.glob("vllm-*.whl"))
        if len(found) != 1:
            raise BuildError(f"pip download of vllm=={wheel['version']} left {len(found)} wheels, not one")
        path = found[0]
        verify_file(path, wheel["sha256"], f"vLLM {wheel['version']}'s wheel")
        say(f"==> check passed: {path.name} matches the known sha256 ({path.stat().st_size} bytes)")
        pins = self.spec["pins"]
        wanted = [f"{n}=={pins[n]}" for n in [*self.spec["torch_packages"], "flashinfer-python"]]
        # The lock was resolved with the toolkit torch pins in one set: vLLM's own dependencies bring another nvcc
        # (13.5 through humming-kernels[cu13] for 0.26.0); resolved together the one that fits both is locked.
        toolkit = self.spec["cuda_toolkit"]
        wanted.append(f"cuda-toolkit[{','.join(toolkit['parts'])}]=={toolkit['version']}")
        self.require_locked(wanted, f"vLLM {wheel['version']}'s build")
        with download_progress("vLLM's dependencies (torch, FlashInfer, the CUDA toolkit, ...)", [self.cache / "pip"]):
            self.install_locked(env, "pip install of the vLLM wheel's lock")
        for dist in self.spec["drop"]:
            if self.installed(dist):
                self.pip(["uninstall", "-y", dist], env, f"pip uninstall {dist}")
        self.require_pins(["vllm", *self.spec["torch_packages"], "flashinfer-python"])
        shutil.rmtree(scratch, ignore_errors=True)

    def step_cuda_toolkit(self) -> None:
        """The toolkit came with the vLLM step's resolution; give it the names a toolkit install has."""
        toolkit = self.spec["cuda_toolkit"]
        got = self.installed("nvidia-cuda-nvcc")
        release = toolkit["version"].rsplit(".", 1)[0]
        if got is None or not got.startswith(f"{release}."):
            raise BuildError(
                f"nvidia-cuda-nvcc is {got or 'not installed'}, not the CUDA {release} torch is built with"
            )
        home = Path(self.spec["cuda_home"])
        # torch's cpp_extension and FlashInfer's JIT link -lcudart from lib64/: the wheels ship lib/ with
        # libcudart.so.13 only, so give them the names a toolkit install has.
        if not (home / "lib64").exists():
            (home / "lib64").symlink_to("lib")
        cudart = home / "lib" / "libcudart.so"
        if not cudart.exists():
            cudart.symlink_to("libcudart.so.13")
        nvcc = output([str(home / "bin" / "nvcc"), "--version"])
        said = next((line.strip() for line in nvcc.splitlines() if "release" in line), nvcc.strip()[-80:])
        if f"release {release}" not in said:
            raise BuildError(f"{home}/bin/nvcc is not CUDA {release}: {said}")
        say(f"==> check passed: CUDA toolkit {toolkit['version']} in the venv ({said})")

    def patch_file(self, name: str) -> Path:
        """The named patch, downloaded whole once and checked by sha256 before every use."""
        entry = self.spec["sm75_patches"][name]
        path = self.work / "patches" / f"{name}.patch"
        if not path.is_file() or sha256_of(path) != entry["sha256"]:
            path.parent.mkdir(exist_ok=True)
            download(entry["url"], path)
        verify_file(path, entry["sha256"], f"the {name} SM75 patch from {redact(entry['url'])}")
        return path

    def release(self) -> str:
        return self.spec["vllm_wheel"]["version"]

    def patch_target(self) -> Path:
        """Where the SM75 patch's vllm/... paths are: the installed package's site-packages."""
        return self.site_packages()

    def step_sm75_patch(self) -> None:
        version = self.release()
        if self.spec["patch_status"] != "clean":
            raise BuildError(f"the SM75 patch is {self.spec['patch_status']} on vLLM {version}: only clean applies")
        path = self.patch_file("vllm")
        done = apply_patch(self.patch_target(), path, f"the SM75 patch to vLLM {version}")
        say(f"==> check passed: SM75 patch {done} (sha256 verified): {', '.join(patched_files(path))}")

    def step_flashqla(self) -> None:
        path = self.patch_file("flashqla")
        done = apply_patch(Path(self.spec["sources"]["flashqla"]), path, "the FlashQLA patch")
        say(f"==> check passed: FlashQLA patch {done} (sha256 verified); kept off the resolver (PYTHONPATH)")

    def step_check(self) -> None:
        patch = self.patch_file("vllm")
        if git_apply(self.site_packages(), patch, "--reverse", "--check").returncode != 0:
            raise BuildError("the SM75 patch is not in place in the installed vLLM; force_rebuild=true builds anew")
        say("==> check passed: the SM75 patch is in place in the installed vLLM")
        super().step_check()
