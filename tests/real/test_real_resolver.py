"""pip's real resolver on the runtime's whole requirement set, for every profile and every FlashInfer
release the settings accept (see tests/real/real_pip.py for what is resolved and how).

Why: the fork pins nvidia-cutlass-dsl==4.4.2 and nvidia-cudnn-frontend<1.19 while FlashInfer 0.6.14/0.6.15
need cutlass-dsl>=4.5.0 and 0.6.16 needs cudnn-frontend>=1.25; a set pip cannot install never builds.
This needs PyPI (CI reaches it); a failure names the conflicting packages in pip's own words.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.real import real_pip
from tests.unit.groupdata import profile_data
from vllm_rig.known import flashinfer_fix
from vllm_rig.settings import Settings
from vllm_rig.stages.runtime.kinds import fork
from vllm_rig.validation import load_settings

PROFILES = (None, "qwen38", "fork_validated")
RELEASES = tuple(profile_data()["flashinfer_requirement_overrides"])

pytestmark = pytest.mark.skipif(
    not real_pip.FORK_REQUIREMENTS.is_dir(), reason="../shared/real-sources is not beside this checkout (CI has it)"
)


def _settings(profile: str | None, release: str) -> Settings:
    """Each profile's settings on the fork kind (the upstream kind's set: test_real_upstream_resolver.py); a
    FlashInfer whose tile cannot serve FP8 KV on SM75 (PR 3621's 0.6.14) on FP16 KV, without the FP8 catalogue."""
    data = {**profile_data(profile), "runtime_kind": "fork", "flashinfer_version": release}
    if not flashinfer_fix.fp8_kv_fits(release, flashinfer_fix.patch_for(release)):
        data |= {"kv_cache_dtype": "auto", "models": {}}
    return load_settings(data)


def _key(s: Settings) -> tuple[str, ...]:
    return (s.python_version, *real_pip.runtime_requirements(s))


@pytest.fixture(scope="module")
def resolved() -> dict[tuple[str, ...], real_pip.Resolution]:
    """One resolution per distinct requirement set (profiles that share a runtime share a run), the runs at once:
    each is a pip mostly waiting on PyPI (one after another they took 142 s of a CI lane)."""
    wanted = {_key(s): s for s in (_settings(p, r) for p in PROFILES for r in RELEASES)}
    for version in {s.python_version for s in wanted.values()}:
        real_pip.resolver_pip(version)  # the venv made once, before the runs that share it
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        runs = {key: pool.submit(real_pip.resolve, list(key[1:]), key[0]) for key in wanted}
    return {key: run.result() for key, run in runs.items()}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p or "default")
def test_every_profile_and_release_resolves_to_our_pins(
    profile: str | None, release: str, resolved: dict[tuple[str, ...], real_pip.Resolution]
) -> None:
    s = _settings(profile, release)
    result = resolved[_key(s)]
    assert result.ok, f"pip cannot install the runtime for FlashInfer {release}:\n{result.output[-3000:]}"
    got = result.installs
    assert fork.runtime_pins(s)["flashinfer-python"] == release
    for name, version in fork.runtime_pins(s).items():
        assert got.get(name) == version, f"{name}: resolved {got.get(name)}, pinned {version}"
    for name, spec in s.requirement_overrides().items():
        assert name in got, f"override {name}{spec} is not in the resolved set"
    assert "flashinfer-cubin" not in got and "flashinfer-jit-cache" not in got


def test_flashinfer_0614_with_the_forks_unmodified_pins_is_refused_naming_the_conflict() -> None:
    s = _settings(None, "0.6.14")
    requirements = real_pip.runtime_requirements(s)
    unmodified = [r for r in requirements if not r.startswith("nvidia-cutlass-dsl")] + ["nvidia-cutlass-dsl==4.4.2"]
    result = real_pip.resolve(unmodified, s.python_version)
    assert not result.ok
    assert "ResolutionImpossible" in result.output
    assert "flashinfer-python 0.6.14 depends on nvidia-cutlass-dsl>=4.5.0" in result.output
    assert "nvidia-cutlass-dsl==4.4.2" in result.output


def test_the_build_keeps_the_forks_bounds_beside_our_pins() -> None:
    """Our transformers pin sits beside the fork's own bound, so pip checks one against the other."""
    requirements = real_pip.runtime_requirements(_settings(None, "0.6.14"))
    assert any(r.startswith("transformers >= 4.56.0") or r.startswith("transformers>=4.56.0") for r in requirements)
    assert "transformers==5.12.1" in requirements and "numba == 0.65.0" in requirements
    assert not any(r.startswith("flashinfer-python==0.6.8") for r in requirements)
    assert "nvidia-cutlass-dsl==4.5.2" in requirements and "nvidia-cutlass-dsl==4.4.2" not in requirements
