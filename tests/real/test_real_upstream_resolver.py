"""pip's real resolver on what the upstream kind's build installs, for every release the settings accept
with runtime_kind upstream: vLLM's wheel with its own torch and FlashInfer pins, then the CUDA toolkit parts
torch pins (two pip steps on the host; resolved here together, which is stricter). Needs PyPI (CI reaches it);
a failure is pip's own words."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tests.real import real_pip
from tests.unit.groupdata import profile_data
from vllm_rig.known import upstream_releases
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import plan
from vllm_rig.validation import SettingsError, load_settings


def _accepted(version: str) -> Settings | None:
    release = upstream_releases.release(version)
    data = {
        **profile_data(),
        "runtime_kind": "upstream",
        "vllm_version": version,
        "torch_version": release.torch,
        "torchvision_version": release.torchvision,
        "torchaudio_version": release.torchaudio,
        "flashinfer_version": release.flashinfer,
    }
    try:
        return load_settings(data)
    except SettingsError:
        return None


ACCEPTED = [v for v in upstream_releases.supported_versions() if _accepted(v) is not None]


def _requirements(s: Settings) -> list[str]:
    """What UpstreamBuild's vllm and cuda_toolkit steps name, from the spec the deploy writes."""
    spec = plan.build_spec(s, RuntimeDirs(s.install_root, "resolve"), "0" * 64, plan.build_inputs(s), 1)
    pins = spec["pins"]
    names = ["vllm", *spec["torch_packages"], "flashinfer-python"]
    toolkit = spec["cuda_toolkit"]
    return [*(f"{n}=={pins[n]}" for n in names), f"cuda-toolkit[{','.join(toolkit['parts'])}]=={toolkit['version']}"]


def test_the_default_release_is_accepted() -> None:
    assert "0.26.0" in ACCEPTED


@pytest.mark.parametrize("version", ACCEPTED)
def test_every_accepted_release_resolves_to_its_own_pins(version: str) -> None:
    s = _accepted(version)
    assert s is not None
    result = real_pip.resolve(_requirements(s), s.python_version)
    assert result.ok, f"pip cannot install vLLM {version}'s runtime:\n{result.output[-3000:]}"
    release = upstream_releases.release(version)
    got = result.installs
    for name, pin in (("vllm", version), ("torch", release.torch), ("flashinfer-python", release.flashinfer)):
        assert got.get(name) == pin, f"{name}: resolved {got.get(name)}, pinned {pin}"
    # The CUDA lane is one lane: torch's own cuda-toolkit pin is the one the build adds for the JIT.
    # PEP 440 equality: PyPI's file for the "==13.0.3" pin is named 13.0.3.0 (seen 2026-12-04).
    assert Version(got["cuda-toolkit"]) == Version(plan.upstream.cuda_toolkit_version(release.torch))
    assert "nvidia-cuda-nvcc" in got and got["nvidia-cuda-nvcc"].startswith("13.0.")
