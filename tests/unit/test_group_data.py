"""group_data/all.py is the one home of every default, and profiles only set known settings.

Its headings, order and comments against the schema, and the settings table (docs/settings.md): test_settings_doc.py."""

from __future__ import annotations

from tests.unit.groupdata import GROUP_DATA, group_data
from vllm_rig.settings import Settings


def test_all_py_sets_exactly_the_schema() -> None:
    assert set(group_data("all")) == set(Settings.model_fields)


def test_profiles_only_set_known_settings() -> None:
    for path in GROUP_DATA.glob("*.py"):
        assert set(group_data(path.stem)) <= set(Settings.model_fields), path.name
