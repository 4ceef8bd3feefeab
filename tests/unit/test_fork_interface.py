"""The fork's interface data the deploy ships (vllm_rig/data/) is the real-sources extraction, unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_rig.known import fork_interface, server_interface

REAL_SOURCES = Path(__file__).resolve().parents[3] / "shared" / "real-sources"


def test_flag_list_is_the_real_parsers_dump() -> None:
    real = REAL_SOURCES / "fork-v0.1.x-cli-flags.txt"
    if not real.is_file():
        pytest.skip(f"{real} is not beside this checkout (CI has it)")
    assert fork_interface.FLAGS_FILE.read_bytes() == real.read_bytes()


def test_flag_list_has_what_the_header_counts() -> None:
    # The header: 336 option strings + the -O alias = 337 lines; the count guards against a truncated copy.
    assert len(server_interface.FORK.flags()) == 337
    assert {
        "--tensor-parallel-size",
        "--no-async-scheduling",
        "-tp",
        "--reasoning-config",
    } <= server_interface.FORK.flags()


def test_reasoning_keys_are_the_real_config_tables() -> None:
    real = REAL_SOURCES / "fork-v0.1.x-config-keys.md"
    if not real.is_file():
        pytest.skip(f"{real} is not beside this checkout (CI has it)")
    section = real.read_text().split("## --reasoning-config", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")]
    assert tuple(rows) == fork_interface.REASONING_CONFIG_KEYS


@pytest.mark.parametrize(
    ("names", "unknown"),
    [
        (["--max_model_len"], []),
        (["--device-ids", "--port"], ["--device-ids"]),
        (["--enable-reasoning"], ["--enable-reasoning"]),
    ],
)
def test_unknown_flags(names: list[str], unknown: list[str]) -> None:
    assert server_interface.FORK.unknown_flags(names) == unknown


def test_every_python_the_settings_allow_is_one_the_fork_supports() -> None:
    from typing import get_args

    from vllm_rig.settings import Settings

    allowed = get_args(Settings.model_fields["python_version"].annotation)
    assert allowed and all(version in fork_interface.REQUIRES_PYTHON for version in allowed)
