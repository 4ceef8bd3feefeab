"""The full run's lanes (tests/lanes): which modules, in which order, in which checkout, and what the end of
the run says. The scheduler runs real pytest sessions over a small throwaway repo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.lanes import __main__ as lanes_main
from tests.lanes import checkout, plan, report, schedule


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_modules_are_every_test_file_but_the_unit_tier(tmp_path: Path) -> None:
    for name in ("tests/unit/test_a.py", "tests/e2e/test_b.py", "tests/sandbox/test_c.py", "tests/e2e/helper.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert plan.modules(tmp_path) == ["tests/e2e/test_b.py", "tests/sandbox/test_c.py"]


def test_longest_first_and_a_module_with_no_time_before_all() -> None:
    known = {"tests/e2e/test_short.py": 10.0, "tests/e2e/test_long.py": 400.0}
    names = ["tests/e2e/test_short.py", "tests/e2e/test_new.py", "tests/e2e/test_long.py"]
    assert plan.order(names, known) == ["tests/e2e/test_new.py", "tests/e2e/test_long.py", "tests/e2e/test_short.py"]


def test_the_last_run_overrides_the_committed_times(tmp_path: Path) -> None:
    (tmp_path / plan.COMMITTED).parent.mkdir(parents=True)
    (tmp_path / plan.COMMITTED).write_text('{"tests/e2e/test_a.py": 100, "tests/e2e/test_b.py": 50}')
    (tmp_path / plan.LAST_RUN).parent.mkdir(parents=True)
    (tmp_path / plan.LAST_RUN).write_text('{"tests/e2e/test_a.py": 20}')
    assert plan.seconds(tmp_path) == {"tests/e2e/test_a.py": 20.0, "tests/e2e/test_b.py": 50.0}


def test_the_committed_times_name_only_modules_that_exist() -> None:
    repo = Path(__file__).resolve().parents[2]
    committed = plan.seconds(repo) if not (repo / plan.LAST_RUN).exists() else {}
    assert set(committed) <= set(plan.modules(repo))


def test_a_lane_copy_holds_what_a_clone_would_and_keeps_its_sandbox(tmp_path: Path) -> None:
    repo = tmp_path / "work" / "rig"
    (repo / "tests").mkdir(parents=True)
    (tmp_path / "work" / "shared").mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".sandbox/\nlan-ca/\n")
    (repo / "tests" / "test_x.py").write_text("tracked\n")
    git(repo, "add", ".")
    (repo / "new.py").write_text("untracked, not ignored\n")
    (repo / "lan-ca").mkdir()
    (repo / "lan-ca" / "rig1-ca.crt").write_text("lane 1's own\n")
    copy = checkout.lane_root(repo, 2)
    (copy / ".sandbox").mkdir(parents=True)
    (copy / ".sandbox" / "machine").write_text("kept\n")
    (copy / "stale.py").write_text("from an earlier run\n")

    assert checkout.lay(repo, 2) == copy == repo / ".sandbox" / "lanes" / "2" / "rig"
    assert (copy / "tests" / "test_x.py").read_text() == "tracked\n"
    assert (copy / "new.py").is_file() and (copy / ".gitignore").is_file()
    assert not (copy / "lan-ca").exists() and not (copy / "stale.py").exists()
    assert (copy / ".sandbox" / "machine").read_text() == "kept\n"
    assert (copy.parent / "shared").resolve() == (tmp_path / "work" / "shared").resolve()
    assert checkout.lay(repo, 1) == repo  # lane 1 is the checkout itself


def test_lanes_run_every_module_once_and_the_end_names_the_failure(tmp_path: Path) -> None:
    repo = tmp_path / "rig"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_ok.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (repo / "tests" / "test_bad.py").write_text("def test_breaks():\n    assert 1 == 2, 'the bad one'\n")
    (repo / "tests" / "test_env.py").write_text(
        "import os, sys\n\ndef test_slot():\n    assert os.environ['VLLM_RIG_SANDBOX_SLOT'] in ('7', '8')\n"
        f"    assert sys.executable == {sys.executable!r}\n"  # the lanes' pytest is this one
    )
    out = tmp_path / "out"
    out.mkdir()
    lanes = [schedule.Lane(1, 7, repo), schedule.Lane(2, 8, repo)]
    said: list[str] = []
    queue = ["tests/test_ok.py", "tests/test_bad.py", "tests/test_env.py"]
    results = schedule.run(lanes, queue, out, said.append)

    assert sorted(r.module for r in results) == sorted(queue)
    assert {r.module: r.ok for r in results} == {
        "tests/test_ok.py": True,
        "tests/test_bad.py": False,
        "tests/test_env.py": True,
    }
    assert lanes_main.verdict(0, results) == 1 and lanes_main.verdict(0, [r for r in results if r.ok]) == 0
    assert lanes_main.verdict(1, [r for r in results if r.ok]) == 1
    assert any("tests/test_bad.py FAILED" in line for line in said)
    lines = report.summary(results, [], wall_s=12.0)
    text = "\n".join(lines)
    assert "the bad one" in text  # the failed module's own output
    assert lines[-1].startswith(
        "lanes: 3 passed, 1 failed, 0 errors, 0 skipped; 3 modules, 1 failed (tests/test_bad.py)"
    )
    slow = lines.index("==== slowest 10 tests (every tier, every lane) ====")
    assert (
        len([line for line in lines[slow + 1 :] if line.endswith(("test_one", "test_two", "test_breaks", "test_slot"))])
        == 4
    )


def test_a_missing_junit_file_is_no_cases(tmp_path: Path) -> None:
    assert report.cases(tmp_path / "none.xml") == []
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite")
    assert report.cases(tmp_path / "cut.xml") == []


def test_slowest_is_ten_longest_first() -> None:
    cases = [report.Case(f"t::{i}", float(i), "passed") for i in range(15)]
    assert [c.seconds for c in report.slowest(cases)] == [14.0, 13.0, 12.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0]
