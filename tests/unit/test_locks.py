"""The hashed locks: a hostile index's wheel (same name and version, other bytes) is refused by the build in one
line naming the package, before anything is installed; a missing or unhashed lock stops the deploy in one line;
the lock's bytes are part of the runtime's fingerprint. pip is real here, the index a local PEP 503 directory."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.fixtures.pkg_index import simple, wheelfile
from tests.unit.groupdata import profile_data
from vllm_rig.host import runtime_build
from vllm_rig.settings import Settings
from vllm_rig.stages import locks
from vllm_rig.stages.locks import first_use, make
from vllm_rig.stages.model.start import HF_HUB_VERSION, PROMETHEUS_CLIENT_VERSION
from vllm_rig.stages.runtime import plan
from vllm_rig.validation import load_settings

REPO = Path(__file__).resolve().parents[2]


def _wheel(payload: str) -> bytes:
    dist = wheelfile.Dist("demo-pkg", "1.0", {"demo_pkg/__init__.py": payload.encode()}, "a demo")
    return wheelfile.build(dist)


def _index(root: Path, data: bytes) -> str:
    name = wheelfile.filename(wheelfile.Dist("demo-pkg", "1.0", {}, ""))
    entry = simple.Entry(name, hashlib.sha256(data).hexdigest(), None, data)
    simple.write_lane(root, [entry])
    return root.as_uri() + "/"


def _build(tmp_path: Path, lock_text: str) -> runtime_build.Build:
    runtime = tmp_path / "runtime"
    (runtime / "venv" / "bin").mkdir(parents=True)
    (runtime / "venv" / "bin" / "python").symlink_to(sys.executable)  # pip only downloads here: nothing installed
    spec = {"runtime": str(runtime), "cache": str(tmp_path / "cache"), "lock": {"name": "demo.txt", "text": lock_text}}
    return runtime_build.Build(spec)


def _lock(data: bytes) -> str:
    return f"demo-pkg==1.0 \\\n    --hash=sha256:{hashlib.sha256(data).hexdigest()}\n"


def test_a_hostile_index_wheel_is_refused_in_one_line_naming_the_package(tmp_path: Path) -> None:
    good, hostile = _wheel("ok = True\n"), _wheel("import os; os.system('id')\n")
    build = _build(tmp_path, _lock(good))
    env = build.pip_env(_index(tmp_path / "hostile", hostile))
    with pytest.raises(runtime_build.BuildError) as err:
        build.pip_locked(["download", "--no-deps", "-d", str(tmp_path / "got")], env, "fetching demo", ["demo-pkg"])
    said = str(err.value)
    assert "\n" not in said and "demo-pkg==1.0" in said and hashlib.sha256(hostile).hexdigest() in said
    assert "refused before anything was installed" in said
    assert not (tmp_path / "got").exists() or not any((tmp_path / "got").iterdir())


def test_the_locked_wheel_passes(tmp_path: Path) -> None:
    good = _wheel("ok = True\n")
    build = _build(tmp_path, _lock(good))
    env = build.pip_env(_index(tmp_path / "good", good))
    build.pip_locked(["download", "--no-deps", "-d", str(tmp_path / "got")], env, "fetching demo", ["demo-pkg"])
    assert [p.read_bytes() for p in (tmp_path / "got").iterdir()] == [good]


def test_a_spec_without_a_lock_installs_nothing_by_version(tmp_path: Path) -> None:
    build = _build(tmp_path, "")
    build.spec["lock"] = None
    with pytest.raises(runtime_build.BuildError, match="no hashed lock"):
        build.install_locked(dict(os.environ), "pip install")


def test_a_requirement_the_lock_lacks_is_named() -> None:
    text = _lock(b"x")
    assert runtime_build.uncovered(["demo_pkg>=0.9", "numpy==2.3.1", "# c"], text) == ["numpy==2.3.1"]
    assert list(runtime_build.lock_blocks(text)) == ["demo-pkg"]


def test_a_line_whose_marker_is_false_for_the_venv_is_not_asked_of_the_lock(tmp_path: Path) -> None:
    build = _build(tmp_path, _lock(b"x"))
    never = "six>=1.16.0; python_version > '9.0'"
    assert build.applicable(["demo-pkg", never, "numpy; python_version >= '3'"]) == [
        "demo-pkg",
        "numpy; python_version >= '3'",
    ]
    build.require_locked(["demo_pkg>=0.9", never], "the tree")  # six is skipped by pip there, so not asked for
    with pytest.raises(runtime_build.BuildError, match="names numpy; python_version >= '3', which the lock"):
        build.require_locked(["demo-pkg", "numpy; python_version >= '3'"], "the tree")


def lock_problems(s: Settings) -> list[str]:
    """One line per lock a deploy of these settings needs and does not have."""
    lines = []
    for read_one in (plan.runtime_lock, locks.tools_lock):
        try:
            read_one(s)
        except locks.LockMissing as err:
            lines.append(str(err))
    return lines


def test_the_default_profile_has_its_locks_and_they_are_fully_hashed() -> None:
    s = load_settings(profile_data())
    assert lock_problems(s) == []
    lock = plan.runtime_lock(s)
    assert lock.name.startswith(f"upstream-wheel-{s.vllm_version}-") and lock.name.endswith(
        f"-py{s.python_version}.txt"
    )
    found = locks.entries(lock.text)
    assert found["vllm"] == s.vllm_version and found["torch"] == s.torch_version
    assert "flashinfer-cubin" not in found and locks.unhashed(lock.text) == []
    # The release wheel's recorded sha256 is one the lock holds for vllm.
    assert s.vllm_wheel().sha256 in runtime_build.lock_blocks(lock.text)["vllm"]


def test_another_pin_is_another_lock_never_a_stale_one() -> None:
    s = load_settings({**profile_data(), "runtime_kind": "fork"})
    other = load_settings(
        {
            **profile_data(),
            "runtime_kind": "fork",
            "flashinfer_version": "0.6.14",
            "kv_cache_dtype": "auto",
            "models": {},
        }
    )
    assert plan.runtime_lock_name(s) != plan.runtime_lock_name(other)
    assert plan.runtime_lock_name(s) == plan.runtime_lock_name(
        load_settings({**profile_data(), "runtime_kind": "fork"})
    )
    assert plan.runtime_lock_name(s).startswith(f"fork-{s.fork_ref[:12]}-cu128-")


def test_a_missing_or_unhashed_lock_is_one_line(tmp_path: Path) -> None:
    s = load_settings({**profile_data(), "locks_dir": str(tmp_path)})
    lines = lock_problems(s)
    assert len(lines) == 2 and all("\n" not in line and "on first use" in line for line in lines)
    assert str(tmp_path / plan.runtime_lock_name(s)) in lines[0]
    (tmp_path / plan.runtime_lock_name(s)).write_text("vllm==0.27.1\n")
    assert "vllm==0.27.1 without --hash" in lock_problems(s)[0]


def test_the_lock_is_part_of_the_runtime_fingerprint(tmp_path: Path) -> None:
    s = load_settings(profile_data())
    moved = tmp_path / "locks"
    moved.mkdir()
    for name in (plan.runtime_lock_name(s), locks.tools_name(s)):
        (moved / name).write_text(locks.directory(s).joinpath(name).read_text())
    other = load_settings({**profile_data(), "locks_dir": str(moved)})
    assert plan.fingerprint(plan.build_inputs(other)) == plan.fingerprint(plan.build_inputs(s))  # where: not what
    (moved / plan.runtime_lock_name(s)).write_text(plan.runtime_lock(s).text + "extra==1 \\\n    --hash=sha256:00\n")
    assert plan.fingerprint(plan.build_inputs(other)) != plan.fingerprint(plan.build_inputs(s))
    spec = plan.build_spec(other, plan.RuntimeDirs(other.install_root, "x"), "0" * 64, {}, 1)
    assert spec["lock"]["text"].endswith("extra==1 \\\n    --hash=sha256:00\n")


# ---- trust on first use: a lock a host needs and locks_dir lacks is written by the deploy, then kept ---------------


def _hub_index(root: Path, payload: str) -> tuple[str, bytes]:
    """A local index serving the tools venv's requirements (stand-ins of their pinned versions, no dependencies);
    the huggingface_hub wheel's bytes."""
    hub = wheelfile.Dist("huggingface_hub", HF_HUB_VERSION, {"huggingface_hub/__init__.py": payload.encode()}, "hub")
    prom = wheelfile.Dist("prometheus_client", PROMETHEUS_CLIENT_VERSION, {"prometheus_client/__init__.py": b""}, "p")
    built = [(d, wheelfile.build(d)) for d in (hub, prom)]
    entries = [simple.Entry(wheelfile.filename(d), hashlib.sha256(data).hexdigest(), None, data) for d, data in built]
    simple.write_lane(root, entries)
    return root.as_uri() + "/", built[0][1]


def _first_use_settings(tmp_path: Path, index: str) -> Settings:
    """The default profile with locks_dir in tmp_path (its runtime lock there already) and a local index (a file://
    URL, which the settings refuse from an owner: set past validation, for this test only)."""
    s = load_settings({**profile_data(), "locks_dir": str(tmp_path / "locks")})
    (tmp_path / "locks").mkdir()
    shutil.copy(REPO / "locks" / plan.runtime_lock_name(s), tmp_path / "locks")
    return s.model_copy(update={"pip_index_url": index})


def test_a_missing_lock_is_written_on_first_use_said_loudly_and_never_rewritten_by_a_deploy(tmp_path: Path) -> None:
    index, good = _hub_index(tmp_path / "index", "ok = True\n")
    s = _first_use_settings(tmp_path, index)
    out = first_use.ensure({"box1": s, "box2": s})
    assert out.problems == []
    assert len(out.written) == 1 and "\n" not in out.written[0]
    said = out.written[0]
    assert said.startswith(f"wrote {Path(s.locks_dir) / locks.tools_name(s)} from {index} on first use")
    assert said.endswith("every box now installs exactly these files; commit it")
    lock = locks.tools_lock(s)
    assert locks.entries(lock.text) == {
        "huggingface-hub": HF_HUB_VERSION,
        "prometheus-client": PROMETHEUS_CLIENT_VERSION,
    }
    assert hashlib.sha256(good).hexdigest() in lock.text and locks.unhashed(lock.text) == []
    # The index now serves other bytes under the same version: a deploy keeps the lock (pip then refuses them).
    _hub_index(tmp_path / "index", "import os; os.system('id')\n")
    again = first_use.ensure({"box1": s})
    assert again.written == [] and again.problems == [] and locks.tools_lock(s).text == lock.text


def test_a_lock_that_cannot_be_written_is_one_line_per_host(tmp_path: Path) -> None:
    s = _first_use_settings(tmp_path, (tmp_path / "nowhere").as_uri() + "/")
    out = first_use.ensure({"box1": s, "box2": s})
    assert out.written == [] and len(out.problems) == 2
    assert [line.split(" ", 1)[0] for line in out.problems] == ["[box1]", "[box2]"]
    assert all("\n" not in line and "none could be written: uv could not resolve" in line for line in out.problems)
    assert not (tmp_path / "locks" / locks.tools_name(s)).exists()


def test_an_unhashed_lock_is_said_not_rewritten(tmp_path: Path) -> None:
    s = _first_use_settings(tmp_path, "https://index.invalid/simple/")
    (tmp_path / "locks" / locks.tools_name(s)).write_text(f"huggingface-hub=={HF_HUB_VERSION}\n")
    out = first_use.ensure({"box1": s})
    assert out.written == [] and len(out.problems) == 1 and "without --hash" in out.problems[0]
    assert (tmp_path / "locks" / locks.tools_name(s)).read_text() == f"huggingface-hub=={HF_HUB_VERSION}\n"


# pyinfra loads the deploy file for every host at once, in gevent greenlets (pyinfra_cli patches the stdlib first).
RACE = """
from gevent import monkey
monkey.patch_all()
import gevent
from vllm_rig import context
from vllm_rig.stages.locks import first_use
said = []
def slow_writing(hosts):
    said.append("writing")
    gevent.sleep(0.2)  # uv and git are subprocesses: the writing host yields
    said.append("written")
    return first_use.Outcome()
first_use.ensure = slow_writing
context.stop_on_bad_settings = lambda: None
def plan(name):
    context.ensure_locks()
    said.append("planned " + name)
gevent.joinall([gevent.spawn(plan, "a"), gevent.spawn(plan, "b")])
print(" | ".join(said))
"""


def test_no_host_plans_while_another_writes_a_missing_lock() -> None:
    proc = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "writing | written | planned a | planned b"


# uv 0.13.9's stderr (not a terminal) for flashinfer-python==0.6.14 beside nvidia-cutlass-dsl==4.4.2, against PyPI
UV_CONFLICT = """error: No solution found when resolving dependencies
  cause: Because flashinfer-python==0.6.14 depends on nvidia-cutlass-dsl>=4.5.0 and you require \
flashinfer-python==0.6.14, we can conclude that you require nvidia-cutlass-dsl>=4.5.0.
         And because you require nvidia-cutlass-dsl==4.4.2, we can conclude that your requirements are unsatisfiable.
"""


def test_the_resolvers_reason_keeps_the_package_that_conflicts_on_one_line() -> None:
    reason = make.uv_reason(UV_CONFLICT)
    assert "\n" not in reason
    assert reason.startswith("No solution found when resolving dependencies cause: Because flashinfer-python==0.6.14")
    assert reason.endswith("your requirements are unsatisfiable.")
    assert make.uv_reason("x" * 5000).endswith(" ...") and len(make.uv_reason("x" * 5000)) < 1300
