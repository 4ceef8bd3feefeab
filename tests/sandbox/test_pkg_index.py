"""The package index fixture: built, served over HTTP on loopback, used by a real pip in fresh venvs.

pip runs with --index-url only, no config files, and an unreachable proxy for every other host, so an
install that needed anything but the local index would fail.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.sandbox import paths
from tests.sandbox.fixtures import pkg_index
from tests.sandbox.fixtures.pkg_index import closure, fixes, realwheels, simple, standins, wheelfile
from tests.unit.groupdata import group_data

PREFILL = "include/flashinfer/attention/prefill.cuh"
DEAD_PROXY = "http://127.0.0.1:9"  # discard port: any request that leaves loopback fails fast
FAKE_SMI = """#!/bin/sh
case "$1" in
  -L) for i in 0 1; do echo "GPU $i: NVIDIA GeForce RTX 2080 Ti (UUID: GPU-$i)"; done;;
  --query-gpu=compute_cap) [ -n "$SMI_NO_QUERY" ] && exit 2; printf '7.5\\n7.5\\n';;
  *) exit 2;;
esac
"""
EXTENSION_C = """#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(ANSWER); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "gdn_standin", NULL, -1, methods};
PyMODINIT_FUNC PyInit_gdn_standin(void) { return PyModule_Create(&mod); }
"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base class signature
        pass


class _Links(html.parser.HTMLParser):
    """Anchors of a simple-index page: (href, data-requires-python)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            a = dict(attrs)
            self.links.append((a["href"] or "", a.get("data-requires-python")))


def _links(page: Path) -> list[tuple[str, str | None]]:
    parser = _Links()
    parser.feed(page.read_text())
    return parser.links


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _isolated_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[var] = DEAD_PROXY
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def _run(cmd: list[str | Path], **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], env=_isolated_env(**extra_env), capture_output=True, text=True, timeout=600
    )


def _ok(cmd: list[str | Path], **extra_env: str) -> str:
    proc = _run(cmd, **extra_env)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _new_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    return where


def _pip_install(venv: Path, index: str, *reqs: str) -> str:
    return _ok([venv / "bin" / "python", "-m", "pip", "install", "--index-url", index, "--no-cache-dir", *reqs])


@pytest.fixture(scope="module")
def manifest() -> dict:
    pkg_index.build()
    return pkg_index.manifest()


@pytest.fixture(scope="module")
def server(manifest: dict) -> Iterator[str]:
    """A static server over paths.WWW on a free loopback port; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(paths.WWW)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def venv(server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the deploy's pins installed from the main index alone."""
    venv = _new_venv(tmp_path_factory.mktemp("main") / "venv")
    reqs = (
        "torch==2.11.0",
        "triton==3.6.0",
        "numpy==2.3.5",
        "flashinfer-python==0.6.14",
        "huggingface_hub==2.4.0",
    )
    _pip_install(venv, server + "simple/", *reqs)
    return venv


def _flashinfer_data(version: str, dest: Path) -> Path:
    """flashinfer/data of a served flashinfer-python wheel, unpacked under dest."""
    wheel = pkg_index.SIMPLE / "flashinfer-python" / f"flashinfer_python-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("flashinfer/data/"):
                zf.extract(name, dest)
    return dest / "flashinfer" / "data"


def _dry_run(diff: Path, data_dir: Path, *extra: str) -> int:
    with diff.open("rb") as f:
        return subprocess.run(
            ["patch", "-p1", "--dry-run", *extra, "-d", str(data_dir)], stdin=f, capture_output=True
        ).returncode


def _installed_data(venv: Path) -> Path:
    out = _ok([venv / "bin" / "python", "-c", "import flashinfer, os; print(os.path.dirname(flashinfer.__file__))"])
    return Path(out.strip()) / "data"


# ---- the index itself


def test_root_lists_pep503_normalized_projects(manifest: dict) -> None:
    projects = {href.rstrip("/") for href, _ in _links(pkg_index.SIMPLE / "index.html")}
    expected = {"torch", "triton", "numpy", "flashinfer-python", "flashinfer-jit-cache", "flashinfer-cubin"}
    assert expected | {"huggingface-hub", "hf-xet", "typing-extensions", "setuptools", "pip", "wheel"} <= projects
    assert all(p == p.lower() and "_" not in p and "." not in p for p in projects)
    assert {"torch", "torchvision", "torchaudio", "triton", "numpy"} <= {
        href.rstrip("/") for href, _ in _links(pkg_index.TORCH_LANE / "index.html")
    }


@pytest.mark.parametrize("lane", ["simple", "whl/cu128"])
def test_every_link_has_a_matching_sha256(manifest: dict, lane: str) -> None:
    root = paths.WWW / lane
    checked = 0
    for page in sorted(root.glob("*/index.html")):
        for href, _ in _links(page):
            file_part, _, fragment = href.partition("#sha256=")
            path = page.parent / urllib.request.url2pathname(file_part)
            assert fragment == _sha256(path) == manifest["files"][lane][path.name]
            checked += 1
    assert checked == len(manifest["files"][lane]) > 10


def test_links_carry_requires_python(manifest: dict) -> None:
    numpy = dict(_links(pkg_index.SIMPLE / "numpy" / "index.html"))
    assert numpy and all(rp and rp.startswith(">=3.") for rp in numpy.values())
    assert "&gt;=" in (pkg_index.SIMPLE / "numpy" / "index.html").read_text()  # escaped in the HTML


def test_real_numpy_for_cp311_and_cp312(manifest: dict) -> None:
    names = [p.name for p in (pkg_index.SIMPLE / "numpy").glob("*.whl")]
    for abi in ("cp311", "cp312"):
        assert any(n.startswith(f"numpy-2.3.5-{abi}-{abi}-manylinux") for n in names), names


def test_torch_lane_versions_carry_cu128(manifest: dict) -> None:
    lane = manifest["files"]["whl/cu128"]
    assert "torch-2.11.0+cu128-py3-none-any.whl" in lane
    assert "torchvision-0.26.0+cu128-py3-none-any.whl" in lane
    assert "torch-2.11.0-py3-none-any.whl" in manifest["files"]["simple"]


def test_rebuild_of_an_unchanged_index_writes_nothing(manifest: dict) -> None:
    before = (pkg_index.SIMPLE / "index.html").stat().st_mtime_ns
    pkg_index.build()
    assert (pkg_index.SIMPLE / "index.html").stat().st_mtime_ns == before


def test_stand_in_wheels_are_deterministic(manifest: dict) -> None:
    for dist in standins.main_lane():
        first, second = wheelfile.build(dist), wheelfile.build(dist)
        assert first == second
        assert hashlib.sha256(first).hexdigest() == manifest["files"]["simple"][wheelfile.filename(dist)]


def test_build_works_offline_from_the_cache(manifest: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object) -> None:
        raise AssertionError("build() tried to download although the cache is complete")

    monkeypatch.setattr(realwheels, "_pip_download", no_network)
    pkg_index.FINGERPRINT.unlink()  # force a full rebuild of the served trees
    pkg_index.build()
    assert pkg_index.manifest() == manifest


# ---- pip against the index


def test_pip_installs_the_pins_from_the_index_alone(venv: Path) -> None:
    py = venv / "bin" / "python"
    code = "import torch, triton, numpy, flashinfer, huggingface_hub as h; "
    code += "print(torch.__version__, torch.version.cuda, triton.__version__, numpy.__version__, "
    code += "flashinfer.__version__, h.__version__)"
    # The main index's torch is PyPI's 2.11.0: a CUDA 13.0 build (the torch lane's +cu128 is 12.8).
    assert _ok([py, "-c", code]).split() == ["2.11.0", "13.0", "3.6.0", "2.3.5", "0.6.14", "2.4.0"]
    assert "download" in _ok([venv / "bin" / "hf", "--help"])


def test_main_index_resolves_for_cp312_too(venv: Path, server: str, tmp_path: Path) -> None:
    cmd: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
    ]
    cmd += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
    cmd += [a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64") for a in ("--platform", p)]
    cmd += ["--index-url", server + "simple/", "--no-cache-dir", "--target", tmp_path / "t"]
    cmd += ["torch==2.11.0", "numpy==2.3.5", "flashinfer-python==0.6.14", "huggingface_hub==2.4.0"]
    out = _ok(cmd)
    assert "numpy-2.3.5" in out and "hf-xet" in out.replace("_", "-")


def test_real_transformers_needs_hub_below_2(venv: Path, server: str) -> None:
    """transformers 5.12.1 (real wheel) and huggingface_hub 2.4.0 cannot share a venv."""
    base: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
    ]
    base += ["--index-url", server + "simple/", "--no-cache-dir"]
    assert "transformers-5.12.1" in _ok([*base, "transformers==5.12.1"])
    clash = _run([*base, "transformers==5.12.1", "huggingface_hub==2.4.0"])
    assert clash.returncode != 0 and "huggingface-hub" in (clash.stdout + clash.stderr).lower()


def test_torch_lane_alone_installs_cu128_builds(server: str, tmp_path: Path) -> None:
    venv = _new_venv(tmp_path / "venv")
    _pip_install(venv, server + "whl/cu128/", "torch==2.11.0+cu128", "torchvision==0.26.0", "torchaudio==2.11.0")
    code = "import torch, torchvision, torchaudio; print(torch.__version__, torchvision.__version__, "
    code += "torchaudio.__version__)"
    out = _ok([venv / "bin" / "python", "-c", code]).split()
    assert out == ["2.11.0+cu128", "0.26.0+cu128", "2.11.0+cu128"]


def test_the_torch_step_as_build_sh_installs_the_lanes_builds_with_the_main_index_first(
    server: str, tmp_path: Path
) -> None:
    """The build's torch step (runtime_build.step_torch): the main index (PyPI's stand-in, whose torch 2.11.0
    has no local version) with the lane as extra index, and the lane's exact versions asked for."""
    venv = _new_venv(tmp_path / "venv")
    py = venv / "bin" / "python"
    reqs = ["torch==2.11.0+cu128", "torchvision==0.26.0+cu128", "torchaudio==2.11.0+cu128", "triton==3.6.0"]
    cmd = [py, "-m", "pip", "install", "--index-url", server + "simple/", "--extra-index-url", server + "whl/cu128/"]
    _ok([*cmd, "--no-cache-dir", *reqs])
    code = "import torch, torchvision, torchaudio; print(torch.__version__, torchvision.__version__, "
    code += "torchaudio.__version__)"
    assert _ok([py, "-c", code]).split() == ["2.11.0+cu128", "0.26.0+cu128", "2.11.0+cu128"]


def test_jit_cache_installs_and_uninstalls(venv: Path, server: str) -> None:
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip"]
    _pip_install(venv, server + "simple/", "flashinfer-jit-cache==0.6.14", "flashinfer-cubin==0.6.14")
    assert _ok([venv / "bin" / "python", "-c", "import flashinfer_jit_cache as j; print(j.__version__)"]).strip() == (
        "0.6.14"
    )
    _ok([*pip, "uninstall", "-y", "flashinfer-jit-cache"])
    assert _run([venv / "bin" / "python", "-c", "import flashinfer_jit_cache"]).returncode != 0
    assert _ok([*pip, "show", "flashinfer-cubin"])


# ---- the torch stand-in


@pytest.fixture
def smi_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    return bin_dir


CUDA_PROBE = (
    "import torch; c = torch.cuda; n = c.device_count(); "
    "print(c.is_available(), n, [c.get_device_capability(i) for i in range(n)])"
)


def test_torch_cuda_reads_nvidia_smi(venv: Path, smi_bin: Path) -> None:
    py = venv / "bin" / "python"
    assert _ok([py, "-c", CUDA_PROBE], PATH=str(smi_bin)).strip() == "True 2 [(7, 5), (7, 5)]"
    assert _ok([py, "-c", CUDA_PROBE], PATH=str(smi_bin), SMI_NO_QUERY="1").strip() == "True 2 [(7, 5), (7, 5)]"
    assert _ok([py, "-c", CUDA_PROBE], PATH=str(smi_bin), CUDA_VISIBLE_DEVICES="1").strip() == "True 1 [(7, 5)]"
    empty = smi_bin.parent / "empty"
    empty.mkdir()
    assert _ok([py, "-c", CUDA_PROBE], PATH=str(empty)).strip() == "False 0 []"


def test_torch_cuda_unavailable_when_nvidia_smi_fails(venv: Path, smi_bin: Path) -> None:
    (smi_bin / "nvidia-smi").write_text(
        "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n"
    )
    assert _ok([venv / "bin" / "python", "-c", CUDA_PROBE], PATH=str(smi_bin)).strip() == "False 0 []"


def test_cpp_extension_builds_once_and_rebuilds_on_change(venv: Path, tmp_path: Path) -> None:
    source = tmp_path / "gdn_forward.cu"
    source.write_text(EXTENSION_C.replace("ANSWER", "75"))
    code = "from torch.utils.cpp_extension import load; "
    code += f"print(load(name='gdn_standin', sources=['{source}']).answer())"
    ext_dir = tmp_path / "torch_extensions"
    py = venv / "bin" / "python"
    assert _ok([py, "-c", code], TORCH_EXTENSIONS_DIR=str(ext_dir)).strip() == "75"
    library = ext_dir / "gdn_standin" / "gdn_standin.so"
    built = library.stat().st_mtime_ns
    assert _ok([py, "-c", code], TORCH_EXTENSIONS_DIR=str(ext_dir)).strip() == "75"
    assert library.stat().st_mtime_ns == built  # reused, not rebuilt
    source.write_text(EXTENSION_C.replace("ANSWER", "76"))
    assert _ok([py, "-c", code], TORCH_EXTENSIONS_DIR=str(ext_dir)).strip() == "76"


# ---- FlashInfer stand-in and the fixed headers


def test_flashinfer_clear_cache_removes_only_its_version(venv: Path, tmp_path: Path) -> None:
    base = tmp_path / "ws"
    ours, other = base / ".cache/flashinfer/0.6.14/75/cached_ops", base / ".cache/flashinfer/0.6.12"
    for d in (ours, other):
        d.mkdir(parents=True)
    _ok([venv / "bin" / "flashinfer", "clear-cache"], FLASHINFER_WORKSPACE_BASE=str(base))
    assert not (base / ".cache/flashinfer/0.6.14").exists() and other.exists()
    home = tmp_path / "home"
    (home / ".cache/flashinfer/0.6.14/75").mkdir(parents=True)
    _ok([venv / "bin" / "python", "-m", "flashinfer", "clear-cache"], HOME=str(home))
    assert not (home / ".cache/flashinfer/0.6.14").exists()


def test_served_fixed_files_match_the_manifest(manifest: dict, server: str) -> None:
    for pr, fix in manifest["flashinfer"]["fixes"].items():
        for path, pinned in fix["files"].items():
            assert pinned["path"] == f"raw/flashinfer-ai/flashinfer/{fix['commit']}/{path}"
            with urllib.request.urlopen(server + pinned["path"]) as response:
                assert hashlib.sha256(response.read()).hexdigest() == pinned["sha256_after"], (pr, path)


def test_served_paths_have_the_real_raw_layout(manifest: dict) -> None:
    """group_data's raw URL with its host swapped for the stand-in's `raw/`: the same commits and paths."""
    real = group_data("all")["flashinfer_sm75_patches"]
    for fix in manifest["flashinfer"]["fixes"].values():
        for path, pinned in fix["files"].items():
            url = real[fix["applies_to"]]["files"][path]["url"]
            assert "raw/" + url.removeprefix("https://raw.githubusercontent.com/") == pinned["path"]


def _diff(tmp_path: Path, pr: str) -> Path:
    """The fix as a unified diff (not served; only to see how the stand-in headers relate)."""
    path = tmp_path / f"{pr}.diff"
    path.write_bytes(fixes.diff(fixes.fix(pr)))
    return path


def _put_served(manifest: dict, pr: str, data: Path) -> None:
    """Fix `pr`'s served files over the headers in data, as the build does."""
    for path, pinned in manifest["flashinfer"]["fixes"][pr]["files"].items():
        shutil.copyfile(paths.WWW / pinned["path"], data / path)


def test_pr3621_applies_only_to_0614(venv: Path, tmp_path: Path) -> None:
    diff = _diff(tmp_path, "3621")
    assert _dry_run(diff, _installed_data(venv)) == 0
    assert _dry_run(diff, _installed_data(venv), "--fuzz=0") == 0
    for version in ("0.6.8.post1", "0.6.12", "0.6.15", "0.6.16"):
        assert _dry_run(diff, _flashinfer_data(version, tmp_path / version)) != 0, version


def test_pr3621_file_is_the_base_header_patched(manifest: dict, venv: Path, tmp_path: Path) -> None:
    pinned = manifest["flashinfer"]["fixes"]["3621"]["files"][PREFILL]
    data = tmp_path / "data"
    shutil.copytree(_installed_data(venv), data)
    assert _sha256(data / PREFILL) == pinned["sha256_before"] == manifest["flashinfer"]["prefill_sha256"]["0.6.14"]
    patched = tmp_path / "patched"
    shutil.copytree(data, patched)
    with _diff(tmp_path, "3621").open("rb") as f:
        subprocess.run(["patch", "-p1", "-d", str(patched)], stdin=f, check=True, capture_output=True)
    _put_served(manifest, "3621", data)
    text = (data / PREFILL).read_text()
    assert _sha256(data / PREFILL) == _sha256(patched / PREFILL) == pinned["sha256_after"]
    assert text.count("constexpr uint32_t smem_sample_lo_mma = 128;") == 3 and "smem_mma_kv_base" in text
    assert "Even the smallest KV tile" not in text and "kVOSplitFixedSmem" not in text


def test_pr3526_files_turn_0615_into_0616_and_fit_nothing_else(manifest: dict, tmp_path: Path) -> None:
    diff = _diff(tmp_path, "3526")
    for version in ("0.6.12", "0.6.14", "0.6.16"):
        assert _dry_run(diff, _flashinfer_data(version, tmp_path / version)) != 0, version
    data = _flashinfer_data("0.6.15", tmp_path / "0.6.15")
    pinned = manifest["flashinfer"]["fixes"]["3526"]["files"]
    assert all(_sha256(data / path) == p["sha256_before"] for path, p in pinned.items())
    assert _dry_run(diff, data, "--fuzz=0") == 0
    _put_served(manifest, "3526", data)
    fixed = _flashinfer_data("0.6.16", tmp_path / "fixed")
    for path, p in pinned.items():
        assert _sha256(data / path) == _sha256(fixed / path) == p["sha256_after"], path


@pytest.mark.parametrize(
    ("version", "placeholder", "kv_sf_mixin", "pr3621_context"),
    [
        ("0.6.8.post1", False, False, False),
        ("0.6.12", True, False, False),
        ("0.6.14", True, False, True),
        ("0.6.15", True, False, False),
        ("0.6.16", False, True, False),
    ],
)
def test_header_markers_per_version(
    manifest: dict, tmp_path: Path, version: str, placeholder: bool, kv_sf_mixin: bool, pr3621_context: bool
) -> None:
    text = (_flashinfer_data(version, tmp_path) / PREFILL).read_text()
    assert ("uint8_t[1]> k_sf_smem;" in text) is placeholder
    assert ("struct KVScaleFactorSmem {};" in text) is kv_sf_mixin
    assert ("Even the smallest KV tile" in text and "kVOSplitFixedSmem" in text) is pr3621_context
    assert ("k_sf_smem" in text) is (version != "0.6.8.post1")
    assert hashlib.sha256(text.encode()).hexdigest() == manifest["flashinfer"]["prefill_sha256"][version]


def test_fix_table_names_the_served_versions() -> None:
    assert {f.applies_to for f in fixes.FIXES} <= set(standins.FLASHINFER_HEADERS)


# ---- the real dependency closure: the runtime's whole requirement set, as a real box resolves it


def _runtime_set(**overrides: object) -> list[str]:
    from tests.real import real_pip
    from tests.unit.groupdata import profile_data
    from vllm_rig.validation import load_settings

    return real_pip.runtime_requirements(load_settings({**profile_data(None), "runtime_kind": "fork", **overrides}))


def _resolve_from_index(server: str, requirements: list[str], tmp_path: Path) -> tuple[int, dict[str, str], str]:
    """The build's requirements step (main index plus the torch lane as extra) as a dry run with Python 3.11:
    (pip's exit status, {name: version}, pip's output)."""
    assert sys.version_info[:2] == (3, 11), "the sandbox machines run Debian 12's Python 3.11"
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("\n".join(requirements) + "\n")
    report = tmp_path / "report.json"
    cmd: list[str | Path] = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    cmd += ["--index-url", server + "simple/", "--extra-index-url", server + "whl/cu128/", "--no-cache-dir"]
    cmd += ["--target", tmp_path / "t", "--report", report, "-r", reqs]
    proc = _run(cmd)
    if proc.returncode != 0:
        return proc.returncode, {}, proc.stdout + proc.stderr
    items = json.loads(report.read_text())["install"]
    return 0, {simple.normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in items}, proc.stdout


def test_default_runtime_set_resolves_to_the_pins(server: str, tmp_path: Path) -> None:
    rc, got, out = _resolve_from_index(server, _runtime_set(), tmp_path)
    assert rc == 0, out[-3000:]
    pins = {
        "torch": "2.11.0",
        "torchvision": "0.26.0",
        "torchaudio": "2.11.0",
        "triton": "3.6.0",
        "transformers": "5.12.1",
        "numpy": "2.3.5",
        "flashinfer-python": "0.6.16",  # the fork's default (PR 3526 merged)
        "nvidia-cutlass-dsl": "4.5.2",
    }
    assert {name: got[name].split("+", 1)[0] for name in pins} == pins
    real = closure.resolved("runtime, flashinfer 0.6.16", "3.11")
    assert set(got) == set(real)  # the same distributions as pip against PyPI
    differ = {n: (got[n], real[n]) for n in got if got[n].split("+", 1)[0] != real[n]}
    assert not differ, differ


def test_fork_cutlass_pin_is_impossible_with_flashinfer_0614(server: str, tmp_path: Path) -> None:
    fp16 = {"flashinfer_version": "0.6.14", "kv_cache_dtype": "auto", "models": {}}  # PR 3621: FP16 KV only
    requirements = [r for r in _runtime_set(**fp16) if not r.startswith("nvidia-cutlass-dsl")]
    rc, _, out = _resolve_from_index(server, [*requirements, "nvidia-cutlass-dsl==4.4.2"], tmp_path)
    assert rc != 0
    assert "ResolutionImpossible" in out and "flashinfer-python==0.6.14" in out, out[-3000:]
    assert "nvidia-cutlass-dsl>=4.5.0" in out.replace(" ", "")


def test_torchvision_comes_from_the_lane_only(server: str, tmp_path: Path) -> None:
    proc = _ok(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "-d",
            tmp_path / "d",
            "--index-url",
            server + "whl/cu128/",
            "torchvision==0.26.0",
        ]
    )
    assert "torchvision-0.26.0+cu128" in proc
    rc, got, out = _resolve_from_index(server, ["torchvision==0.26.0"], tmp_path)
    assert rc == 0 and got["torchvision"] == "0.26.0+cu128" and got["torch"] == "2.11.0+cu128", out


def test_torch_step_fails_on_a_lane_without_torchvision(manifest: dict, tmp_path: Path) -> None:
    """step_torch installs the torch packages from the torch index alone: a lane that lacks one fails."""
    lane = tmp_path / "www" / "lane"
    shutil.copytree(pkg_index.TORCH_LANE, lane, ignore=shutil.ignore_patterns("torchvision"))
    projects = [p.name for p in lane.iterdir() if p.is_dir()]
    (lane / "index.html").write_text(simple.root_page(projects))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(tmp_path / "www")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/lane/"
        wanted = ["torch==2.11.0", "torchvision==0.26.0", "torchaudio==2.11.0", "triton==3.6.0"]
        proc = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--no-cache-dir",
                "--target",
                tmp_path / "t",
                "--index-url",
                url,
                *wanted,
            ]
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode != 0
    assert "No matching distribution found for torchvision==0.26.0" in proc.stdout + proc.stderr


def test_default_runtime_set_installs_into_a_fresh_venv(server: str, tmp_path: Path) -> None:
    """What the build does for every fresh runtime; the time is printed (pytest -s) for the record."""
    venv = _new_venv(tmp_path / "venv")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("\n".join(_runtime_set()) + "\n")
    start = time.monotonic()
    _ok(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--index-url",
            server + "simple/",
            "--extra-index-url",
            server + "whl/cu128/",
            "--no-cache-dir",
            "-r",
            reqs,
        ]
    )
    elapsed = time.monotonic() - start
    print(f"\ndefault runtime set installed from the sandbox index in {elapsed:.1f}s")
    freeze = _ok([venv / "bin" / "python", "-m", "pip", "list", "--format=freeze"])
    assert "flashinfer-python==0.6.16" in freeze and "transformers==5.12.1" in freeze
