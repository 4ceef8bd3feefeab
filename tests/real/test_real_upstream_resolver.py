"""pip's real resolver on what the upstream kind's build installs, for every release the settings accept
with runtime_kind upstream: vLLM's wheel with its own torch and FlashInfer pins, then the CUDA toolkit parts
torch pins (two pip steps on the host; resolved here together, which is stricter). Needs PyPI (CI reaches it);
a failure is pip's own words."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tests.real import real_pip
from tests.unit.groupdata import profile_data
from vllm_rig.known import flashinfer_fix, upstream_releases
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime import plan
from vllm_rig.stages.runtime.kinds import upstream_wheel
from vllm_rig.validation import SettingsError, load_settings


def _accepted(version: str, profile: str | None = None) -> Settings | None:
    """The profile's settings on the upstream kind at `version` (null pins: the release's own); a release whose
    FlashInfer serves FP16 KV only (flashinfer_fix.fp8_kv_fits) with FP16 KV and without the FP8-KV catalogue."""
    data = {**profile_data(profile), "runtime_kind": "upstream", "vllm_version": version}
    release = upstream_releases.release(version)
    if not flashinfer_fix.fp8_kv_fits(release.flashinfer, release.flashinfer_fix()):
        data |= {"kv_cache_dtype": "auto", "models": {}}
    try:
        return load_settings(data)
    except SettingsError:
        return None


ACCEPTED = [v for v in upstream_releases.supported_versions() if _accepted(v) is not None]
# The profiles a host of the upstream kind can have: fork_validated names the fork's own FlashInfer pin, which the
# upstream kind refuses (its release pins its own).
PROFILES = [None, "qwen38"]


def _requirements(s: Settings) -> list[str]:
    """What UpstreamBuild's vllm and cuda_toolkit steps name, from the spec the deploy writes."""
    spec = plan.build_spec(s, RuntimeDirs(s.install_root, "resolve"), "0" * 64, plan.build_inputs(s), 1)
    pins = spec["pins"]
    names = ["vllm", *spec["torch_packages"], "flashinfer-python"]
    toolkit = spec["cuda_toolkit"]
    return [*(f"{n}=={pins[n]}" for n in names), f"cuda-toolkit[{','.join(toolkit['parts'])}]=={toolkit['version']}"]


def test_the_default_release_is_accepted_in_every_profile() -> None:
    assert upstream_releases.DEFAULT == "0.27.1" and {"0.26.0", "0.27.1"} <= set(ACCEPTED)
    for profile in PROFILES:
        s = _accepted(upstream_releases.DEFAULT, profile)
        assert s is not None and s.kv_cache_dtype in ("fp8_e4m3", "auto"), profile
    assert _accepted(upstream_releases.DEFAULT, "fork_validated") is None


@pytest.mark.parametrize("profile", PROFILES[1:], ids=str)
def test_every_profile_on_the_upstream_kind_resolves_the_default_releases_set(profile: str) -> None:
    """The requirement set follows the release, not the profile: each profile's settings name the same one."""
    s = _accepted(upstream_releases.DEFAULT, profile)
    default = _accepted(upstream_releases.DEFAULT)
    assert s is not None and default is not None
    assert _requirements(s) == _requirements(default)


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
    assert Version(got["cuda-toolkit"]) == Version(upstream_wheel.cuda_toolkit_version(release.torch))
    assert "nvidia-cuda-nvcc" in got and got["nvidia-cuda-nvcc"].startswith("13.0.")
