"""group_data/all.py is the one home of every setting: complete, commented, and documented."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.groupdata import GROUP_DATA, group_data
from vllm_rig.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_all_py_sets_exactly_the_schema() -> None:
    assert set(group_data("all")) == set(Settings.model_fields)


def test_every_setting_has_its_comment_line() -> None:
    uncommented = [
        line.split(" =", 1)[0]
        for line in (GROUP_DATA / "all.py").read_text().splitlines()
        if re.match(r"^[a-z]\w* = ", line) and "  # " not in line
    ]
    assert uncommented == []


def test_profiles_only_set_known_settings() -> None:
    for path in GROUP_DATA.glob("*.py"):
        assert set(group_data(path.stem)) <= set(Settings.model_fields), path.name


def test_readme_settings_table_lists_every_setting() -> None:
    documented = set(re.findall(r"^\| `([a-z]\w*)` \|", README.read_text(), flags=re.M))
    assert set(group_data("all")) - documented == set()
