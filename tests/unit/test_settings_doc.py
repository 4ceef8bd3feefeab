"""Each setting is described once, in vllm_rig/settings.py: the settings table (docs/settings.md) is generated from it
(and from group_data/all.py's defaults), and all.py's headings, order and comments are checked against it."""

from __future__ import annotations

import pytest

from vllm_rig import settings_doc
from vllm_rig.settings import Settings

ALL_PY = settings_doc.ALL_PY.read_text()


def test_readme_settings_table_is_the_generated_one() -> None:
    problems = settings_doc.readme_problems()
    assert problems == [], f"{problems[0]}\n(docs/settings.md's table is generated: run {settings_doc.COMMAND})"


def test_all_py_follows_the_schema() -> None:
    assert settings_doc.all_py_problems() == []


def test_every_field_has_a_stage_a_description_and_an_allowed_sentence() -> None:
    stages = settings_doc.stages()
    assert list(stages) == list(Settings.model_fields)
    lacking = [
        key
        for key in Settings.model_fields
        if not (stages[key] and settings_doc.description(key) and settings_doc.allowed(key))
    ]
    assert lacking == []


def test_a_comment_that_differs_from_the_description_is_named() -> None:
    text = ALL_PY.replace("vllm_port = 8000  # API port\n", "vllm_port = 8000  # the API port (TCP)\n")
    (problem,) = settings_doc.all_py_problems(text)
    assert "vllm_port: its comment must be its description" in problem and "'# API port'" in problem


def test_a_setting_under_another_stage_heading_is_named() -> None:
    text = ALL_PY.replace("preflight_report = ", "\n# ---- driver: moved\npreflight_report = ", 1)
    assert any(
        "preflight_report stands under the heading of stage 'driver'; its stage is 'preflight'" in line
        for line in settings_doc.all_py_problems(text)
    )


def test_a_setting_out_of_the_schema_order_is_named() -> None:
    lines = ALL_PY.splitlines()
    port = lines.index("vllm_port = 8000  # API port")
    lines[port], lines[port + 1] = lines[port + 1], lines[port]  # vllm_api_key now stands first
    problems = settings_doc.all_py_problems("\n".join(lines) + "\n")
    assert problems == [
        f"group_data/all.py:{port + 1}: vllm_api_key stands where vllm_rig/settings.py has vllm_port: "
        "keep the schema's order"
    ]


def test_missing_unknown_and_repeated_settings_are_named() -> None:
    text = ALL_PY.replace("vllm_port = 8000  # API port\n", "") + "vllm_port_typo = 1\nbench_label = 'x'\n"
    problems = settings_doc.all_py_problems(text)
    assert any(p.endswith("vllm_port_typo is not a field of vllm_rig/settings.py") for p in problems)
    assert any("bench_label is set again (first on line" in p for p in problems)
    assert "group_data/all.py: vllm_port is missing" in problems


def test_mapping_defaults_show_their_keys_and_cells_keep_the_table_whole() -> None:
    assert settings_doc._default({"a": 1}) == '`{"a": 1}`'
    assert settings_doc._default({"k" * 40: 1, "l" * 30: 2}) == f'`{{"{"k" * 40}": …, "{"l" * 30}": …}}`'
    assert settings_doc._default([0, 1]) == "`[0, 1]`"
    assert settings_doc._cell("a | b ~1 <think>") == "a \\| b \\~1 &lt;think>"


def test_readme_without_its_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="marker lines"):
        settings_doc.readme_with_table("# README\n\nno table here\n")


def test_write_replaces_only_the_table(tmp_path, monkeypatch, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n\n{settings_doc.BEGIN}\n| stale |\n{settings_doc.END}\n\nafter\n")
    monkeypatch.setattr(settings_doc, "README", readme)
    assert settings_doc.main(["--check"]) == 1
    assert "'| stale |' should read" in capsys.readouterr().err
    assert settings_doc.main(["--write"]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith(f"{settings_doc.END}\n\nafter\n")
    assert "| stale |" not in text and "| `vllm_port` | `8000` | API port | an integer from 1 to 65535 |" in text
    assert settings_doc.main(["--check"]) == 0
