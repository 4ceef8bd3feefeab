"""What the pinned fork line's server accepts: its command-line flags and the keys of its JSON config flags.

The flag list (fork-v0.1.x-cli-flags.txt beside this module) is the real parser of the fork's v0.1.x line
dumped option by option; its header says how, from what: the upstream vLLM 0.21.0 wheel (named with its
sha256) with the fork's arg_utils.py, make_arg_parser, every option string. A flag or key outside these
makes the real server exit with code 2 at argument parsing, before it loads anything, and systemd would
restart it forever: settings validation refuses it first, with one line.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from packaging.specifiers import SpecifierSet

FLAGS_FILE = Path(__file__).resolve().parent / "fork-v0.1.x-cli-flags.txt"

# vLLM 0.21.0 vllm/config/reasoning.py: ReasoningConfig's init fields (pydantic, extra="forbid").
REASONING_CONFIG_KEYS = ("reasoning_parser", "reasoning_start_str", "reasoning_end_str")

FORK_LINE = "v0.1.x (vLLM 0.21.0 base)"

# culyun/vLLM-2080Ti-Definitive@399bb74d (the v0.1.17 state):pyproject.toml, [project] requires-python.
REQUIRES_PYTHON = SpecifierSet(">=3.10,<3.15")


@cache
def flags() -> frozenset[str]:
    """Every option string the fork's parser accepts (long flags, their --no- forms, short aliases)."""
    lines = FLAGS_FILE.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.startswith("-"))


def unknown_flags(names: list[str] | set[str]) -> list[str]:
    """The names (e.g. "--device-ids") the fork's parser would refuse; '_' and '-' are one there."""
    known = flags()
    return sorted(n for n in names if n.split("=", 1)[0].replace("_", "-") not in known)


def unknown_reasoning_keys(config: dict[str, object]) -> list[str]:
    return sorted(set(config) - set(REASONING_CONFIG_KEYS))
