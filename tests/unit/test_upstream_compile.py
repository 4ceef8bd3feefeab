"""upstream_build compile: the settings it needs, the plan (fingerprint, sources, spec), the unit it renders, and
the host build's handling of the source archive (every member checked before anything is written)."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.unit.groupdata import compile_sources, profile_data
from tests.unit.test_unit_parity import _argv, _env
from vllm_rig.host import upstream_compile as host_compile
from vllm_rig.host.build_runtime import build_for
from vllm_rig.host.runtime_build import BuildError, relane
from vllm_rig.known import upstream_compile, upstream_releases
from vllm_rig.paths import Layout, RuntimeDirs
from vllm_rig.settings import Settings, upstream_release_pins
from vllm_rig.stages.runtime import plan
from vllm_rig.stages.service.unit import render_unit
from vllm_rig.validation import SettingsError, load_settings


def _settings(**changes: Any) -> Settings:
    base = {
        **profile_data(),
        "runtime_kind": "upstream",
        "upstream_build": "compile",
        "vllm_version": "0.26.0",
        "upstream_compile_sources": compile_sources(str(changes.get("vllm_version", "0.26.0"))),
    }
    # 0.26.0 serves FP16 KV only; the catalogue's FP8-KV entries could not be switched to there
    return load_settings({**base, "kv_cache_dtype": "auto", "models": {}, **changes})


def test_a_release_without_a_recorded_source_archive_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every supported release has its archive recorded today; one without a row is refused before any host."""
    monkeypatch.setattr(upstream_compile, "SDISTS", {"0.26.0": upstream_compile.SDISTS["0.26.0"]})
    with pytest.raises(SettingsError) as err:
        _settings(vllm_version="0.27.1", **upstream_release_pins("0.27.1"))
    assert len(err.value.lines) == 1, err.value.lines
    line = err.value.lines[0]
    assert line.startswith("settings: upstream_build='compile'") and "0.27.1's source archive" in line
    assert "supports 0.26.0" in line


def test_an_unsupported_release_has_no_recorded_archive() -> None:
    with pytest.raises(ValueError) as err:
        upstream_compile.sdist("0.25.1")
    assert "supports 0.26.0, 0.27.1;" in str(err.value) and "\n" not in str(err.value)


REQUIREMENTS = Path(__file__).resolve().parents[1] / "sandbox/fixtures/pkg_index/upstream"


@pytest.mark.parametrize("version", sorted(upstream_compile.SDISTS))
def test_each_rows_build_requirements_are_its_archives(version: str) -> None:
    """The row's build requirements are its pyproject.toml's [build-system] requires as read from the archive
    (tests/sandbox/fixtures/pkg_index/upstream/vllm-V-sdist-requirements.json), torch left out; its torch is the
    wheel row's pin."""
    real = json.loads((REQUIREMENTS / f"vllm-{version}-sdist-requirements.json").read_text())
    assert upstream_compile.SDISTS[version].sha256 in real["source"]
    requires = [Requirement(line) for line in real["build_system"]["requires"]]
    torch = [r for r in requires if r.name == "torch"]
    assert [str(r.specifier) for r in torch] == [f"=={upstream_releases.release(version).torch}"]
    row = [Requirement(line) for line in upstream_compile.SDISTS[version].build_requires]
    assert [(r.name, r.specifier) for r in row] == [(r.name, r.specifier) for r in requires if r.name != "torch"]


def test_0_27_1_compiles_with_its_own_pins_and_nine_sources() -> None:
    """0.27.1's archive: torch 2.13.0 from the cu128 lane, FlashInfer 0.6.16.post3 with no fix, and FlashKDA beside
    the eight sources 0.26.0 has, each handed to CMake by its variable."""
    s = _settings(vllm_version="0.27.1", kv_cache_dtype="fp8_e4m3")  # its FlashInfer serves FP8 KV
    assert s.triton_version == "3.7.1"  # torch 2.13.0's pin, without a setting
    sdist = upstream_compile.sdist("0.27.1")
    inputs = plan.build_inputs(s)
    assert inputs["vllm_sdist_sha256"] == sdist.sha256 and inputs["vllm"] == "0.27.1"
    assert inputs["pins"]["torch"] == "2.13.0" and inputs["pins"]["flashinfer-python"] == "0.6.16.post3"
    assert inputs["flashinfer_fix"] is None
    assert set(inputs["sources"]) == set(upstream_compile.SOURCES_0_26_0) | {"flashkda"}
    assert inputs["sources"]["deepgemm"] == "e21c821f39a2056d68067a466c64ddc942200106"
    assert plan.fingerprint(inputs) != plan.fingerprint(plan.build_inputs(_settings()))
    dirs = RuntimeDirs(s.install_root, "abc")
    spec = plan.build_spec(s, dirs, "f" * 64, inputs, 4)
    assert spec["vllm_sdist"] == {
        "version": "0.27.1",
        "sha256": "eec2d54d137ac1e59cb4c39226dfee1943eefc8f4788f5821d7300d6acbdb646",
        "filename": "vllm-0.27.1.tar.gz",
        "expected_version": "0.27.1+cu129",
    }
    assert spec["torch_exact"] == {"torch": "2.13.0+cu128", "torchvision": "0.28.0+cu128", "torchaudio": "2.11.0+cu128"}
    assert spec["fetchcontent"]["flashkda"] == {"env": "FLASH_KDA_SRC_DIR", "dir": dirs.dep("flashkda")}
    urls = {url for _, url, *_ in plan.git_sources(s, dirs)}
    assert s.git_mirror_prefix + "https://github.com/vllm-project/FlashKDA.git" in urls


def test_a_torch_lane_the_card_cannot_compile_for_is_refused() -> None:
    with pytest.raises(SettingsError) as err:
        _settings(torch_index_url="https://mirror.example/whl/cu130")
    assert len(err.value.lines) == 1 and err.value.lines[0].startswith("settings: torch_index_url="), err.value.lines
    assert "CUDA 12 lane" in err.value.lines[0]
    assert _settings(upstream_build="wheel", torch_index_url="https://mirror.example/whl/cu130")  # the wheel's own


def test_the_fingerprint_names_the_archive_the_lane_the_toolkit_and_the_sources() -> None:
    s = _settings()
    inputs = plan.build_inputs(s)
    sdist = upstream_compile.sdist("0.26.0")
    assert inputs["kind"] == "upstream-compile" and inputs["vllm_sdist_sha256"] == sdist.sha256
    assert inputs["torch_lane"] == "cu128" and inputs["cuda"] == "12.9" and inputs["arch_list"] == "7.5"
    assert inputs["pins"]["torch"] == "2.11.0" and inputs["pins"]["flashinfer-python"] == "0.6.14"
    assert inputs["flashinfer_fix"]["patch"] == "pr3621"
    assert set(inputs["sources"]) == set(sdist.sources)  # all eight: 0.26.0's CMake fetches each on SM75 too
    wheel = plan.build_inputs(_settings(upstream_build="wheel"))
    assert plan.fingerprint(inputs) != plan.fingerprint(wheel)  # a switch of build is a runtime change
    assert plan.fingerprint(inputs) != plan.fingerprint(plan.build_inputs(_settings(vllm_sdist_sha256="0" * 64)))


def test_the_spec_hands_each_source_to_its_cmake_variable() -> None:
    s = _settings(git_mirror_prefix="https://mirror.example/")
    dirs = RuntimeDirs(s.install_root, "abc")
    checkouts = plan.git_sources(s, dirs)
    assert checkouts[0][0] == "FlashQLA" and all(url.startswith("https://mirror.example/") for _, url, *_ in checkouts)
    assert {dest for *_, dest in checkouts[1:]} == {dirs.dep(n) for n in s.compile_sources()}
    spec = plan.build_spec(s, dirs, "f" * 64, plan.build_inputs(s), 4)
    assert spec["kind"] == "upstream-compile" and spec["cuda_home"] == "/usr/local/cuda-12.9"
    assert spec["vllm_sdist"]["expected_version"] == "0.26.0+cu129"
    assert spec["torch_exact"]["torch"] == "2.11.0+cu128" and spec["arch_list"] == "7.5"
    assert spec["sources"]["cutlass"] == dirs.dep("cutlass") and spec["sources"]["triton"] == dirs.dep("triton_kernels")
    variables = {dep["env"] for dep in spec["fetchcontent"].values()}
    assert variables == {"FMHA_SM100_SRC_DIR", "TML_FA4_SRC_DIR", "FLASH_MLA_SRC_DIR", "QUTLASS_SRC_DIR"} | {
        "VLLM_FLASH_ATTN_SRC_DIR",
        "DEEPGEMM_SRC_DIR",
    }
    assert spec["kernel_modules"] == ["vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch"]
    assert "setuptools-rust>=1.9.0" in spec["build_requires"] and not any("torch" in r for r in spec["build_requires"])
    assert type(build_for(spec)).__name__ == "UpstreamCompileBuild"


def test_the_unit_is_the_seeds_line_with_the_cards_toolkit() -> None:
    s = _settings()
    unit = render_unit(s, Layout.of(s))
    wheel_settings = _settings(upstream_build="wheel")
    assert _argv(unit) == _argv(render_unit(wheel_settings, Layout.of(wheel_settings)))  # same server line
    env = _env(s)
    assert env["CUDA_HOME"] == "/usr/local/cuda-12.9" and env["PATH"].startswith("/usr/local/cuda-12.9/bin:")
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_the_default_sources_are_the_releases_own_pins() -> None:
    s = _settings()
    assert s.compile_sources() == compile_sources("0.26.0")
    assert upstream_compile.SOURCES_0_26_0["triton_kernels"]["ref"] == "v3.5.1"  # 0.26.0's, not the fork's v3.6.0


def test_a_release_source_known_only_by_its_tag_is_refused_in_one_line() -> None:
    """The attack: a mirror moves v3.5.1. Without the commit the compile is refused; a tag never reaches git."""
    with pytest.raises(SettingsError) as err:
        _settings(upstream_compile_sources=None)
    assert len(err.value.lines) == 1, err.value.lines
    line = err.value.lines[0]
    assert "triton_kernels is pinned by the tag 'v3.5.1'" in line and "git ls-remote" in line
    tagged = {
        **compile_sources("0.26.0"),
        "triton_kernels": {**compile_sources("0.26.0")["triton_kernels"], "ref": "v3.5.1"},
    }
    with pytest.raises(SettingsError) as err:
        _settings(upstream_compile_sources=tagged)
    assert len(err.value.lines) == 1 and "must be a 40-character lower-case commit SHA" in err.value.lines[0]
    assert upstream_compile.local_version("0.26.0", "13.0") == "0.26.0"


# ---- the source archive, as hostile as a mirror could make it


def _archive(path: Path, members: list[tuple[str, str, bytes | str]]) -> Path:
    """(name, kind, data or link target): kind "file", "dir", "symlink", "hardlink"."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[kind]
            info.linkname = str(data)
            tar.addfile(info)
    return path


GOOD = [("vllm-0.26.0", "dir", ""), ("vllm-0.26.0/setup.py", "file", b"# setup\n")]


def test_a_good_archive_lands_whole_with_its_top_folder_stripped(tmp_path: Path) -> None:
    tree = tmp_path / "src" / "vllm"
    archive = _archive(tmp_path / "a.tar.gz", [*GOOD, ("vllm-0.26.0/vllm/__init__.py", "file", b"")])
    host_compile.unpack_sdist(archive, "vllm-0.26.0", tree)
    assert (tree / "setup.py").read_bytes() == b"# setup\n" and (tree / "vllm" / "__init__.py").is_file()
    assert not tree.with_name("vllm.unpacking").exists()


@pytest.mark.parametrize(
    ("member", "said"),
    [
        (("vllm-0.26.0/../../etc/cron.d/x", "file", b"* * * * * root sh\n"), "not a plain relative name"),
        (("/etc/passwd", "file", b"x"), "outside its vllm-0.26.0/ folder"),
        (("other/setup.py", "file", b"x"), "outside its vllm-0.26.0/ folder"),
        (("vllm-0.26.0/escape", "symlink", "../../../../etc"), "a target outside the tree"),
        (("vllm-0.26.0/abs", "symlink", "/etc/shadow"), "an absolute target"),
        (("vllm-0.26.0/hard", "hardlink", "/etc/shadow"), "a hard link"),
    ],
)
def test_a_hostile_member_is_refused_and_nothing_is_written(tmp_path: Path, member: tuple, said: str) -> None:
    tree = tmp_path / "src" / "vllm"
    tree.mkdir(parents=True)
    (tree / "kept").write_text("the tree before")
    archive = _archive(tmp_path / "a.tar.gz", [*GOOD, member])
    with pytest.raises(BuildError) as err:
        host_compile.unpack_sdist(archive, "vllm-0.26.0", tree)
    assert said in str(err.value)
    assert (tree / "kept").read_text() == "the tree before"  # the earlier tree is left as it was
    assert not tree.with_name("vllm.unpacking").exists()
    assert not (tmp_path / "etc").exists()


def test_a_member_below_a_symlink_is_refused(tmp_path: Path) -> None:
    archive = _archive(
        tmp_path / "a.tar.gz",
        [*GOOD, ("vllm-0.26.0/link", "symlink", "vllm"), ("vllm-0.26.0/link/x.py", "file", b"")],
    )
    with pytest.raises(BuildError, match="below link"):
        host_compile.unpack_sdist(archive, "vllm-0.26.0", tmp_path / "tree")


def test_pip_refusing_other_bytes_is_said_in_one_line_naming_the_known_hash(tmp_path: Path) -> None:
    """Real pip, a local index holding an archive whose bytes are not the pinned ones: it stops before the
    archive's setup.py could run (the marker it would write is never written)."""
    index = tmp_path / "index"
    index.mkdir()
    marker = tmp_path / "setup-py-ran"
    setup = (
        f"open({str(marker)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='vllm', version='0.26.0')\n"
    )
    _archive(index / "vllm-0.26.0.tar.gz", [*GOOD[:1], ("vllm-0.26.0/setup.py", "file", setup.encode())])
    build = host_compile.UpstreamCompileBuild(
        {
            "runtime": str(tmp_path / "rt"),
            "cache": str(tmp_path / "cache"),
            "vllm_sdist": {"version": "0.26.0", "sha256": "0" * 64},
        }
    )
    build.python = Path(sys.executable)
    requirement = tmp_path / "req.txt"
    requirement.write_text(f"vllm==0.26.0 --hash=sha256:{'0' * 64}\n")
    args = ["download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--require-hashes", "--no-index"]
    said = build.pip_said(
        [*args, "--find-links", str(index), "-d", str(tmp_path / "out"), "-r", str(requirement)], dict(os.environ)
    )
    assert said is not None and "not the known one" in said and "0" * 64 in said
    assert not marker.exists()


def test_relane_swaps_only_the_named_packages_cuda_13_extras() -> None:
    lines = [
        "humming-kernels[cu13]==0.1.10",
        "nvidia-cutlass-dsl[cu13]==4.6.0",
        "nvidia_cutlass_dsl[cu13,extra2] >= 4.6",
        'tokenspeed-mla==0.1.8; platform_system == "Linux"',
        "other[cu13]==1.0",
    ]
    assert relane(lines, upstream_compile.CUDA12_EXTRAS) == [
        "humming-kernels[cu12]==0.1.10",
        "nvidia-cutlass-dsl==4.6.0",
        "nvidia_cutlass_dsl[extra2] >= 4.6",
        'tokenspeed-mla==0.1.8; platform_system == "Linux"',
        "other[cu13]==1.0",  # not in the table: the release's line as it is
    ]
