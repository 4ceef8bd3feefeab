"""CUDA: the pinned toolkit (cuda-toolkit-<major>-<minor>, no driver metapackages), /usr/local/cuda held on
it, CUDA_HOME and PATH for login shells, and a check that nvcc and the static libraries the fork's build
needs are there."""

from pyinfra.api import deploy

from vllm_rig.core.alternatives import alternative
from vllm_rig.core.checks import require
from vllm_rig.core.files import config_files, rendered
from vllm_rig.core.packages import distro_packages, lists_fresh
from vllm_rig.core.run import host_failed
from vllm_rig.settings import Settings
from vllm_rig.stages.cuda.facts import CudaToolkit

PROFILE_FILE = "/etc/profile.d/vllm-rig-cuda.sh"


def toolkit_problem(cuda_home: str, release: str) -> str | None:
    from pyinfra import host

    found = host.get_fact(CudaToolkit, cuda_home=cuda_home)
    if found["release"] != release:
        return f"nvcc in {cuda_home} reports release {found['release']}, want {release}"
    if found["missing_libs"]:
        return (
            f"{cuda_home}/lib64 lacks {', '.join(found['missing_libs'])}: "
            f"apt-get install --reinstall cuda-cudart-dev-{release.replace('.', '-')}"
        )
    return None


@deploy("CUDA")
def install_cuda(s: Settings) -> None:
    if host_failed():
        return
    package = f"cuda-toolkit-{s.cuda_version.replace('.', '-')}"
    lists_fresh(name=f"Package lists know {package} and are less than a day old", packages=[package])
    distro_packages(name=f"CUDA toolkit {s.cuda_version}", packages=[package])
    alternative(name=f"/usr/local/cuda stays on {s.cuda_version}", link_name="cuda", path=s.cuda_home)
    config_files(
        name="CUDA_HOME and PATH for login shells",
        files=(rendered(PROFILE_FILE, "cuda/profile-cuda.sh.j2", cuda_home=s.cuda_home),),
    )
    require(
        name=f"nvcc {s.cuda_version} and the static libraries are there",
        problem=lambda: toolkit_problem(s.cuda_home, s.cuda_version),
    )
