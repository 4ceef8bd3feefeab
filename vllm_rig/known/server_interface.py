"""What the server a runtime kind installs accepts on its command line, one interface for both kinds.

- fork: the weicj fork's v0.1.x line (fork_interface: its real parser dumped, ReasoningConfig without a
  budget key, the budget through VLLM_DEFAULT_THINKING_TOKEN_BUDGET, no --device-ids).
- upstream: vLLM's release with zyYuc's SM75 patch applied (upstream-<version>-cli-flags.txt beside this
  module: the patched release's real parser dumped; the patch adds default_thinking_token_budget to
  ReasoningConfig, so the budget goes in --reasoning-config, and the release has --device-ids).

A flag or key outside the interface makes the real server exit with code 2 at argument parsing, before it
loads anything: settings validation refuses it first, with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vllm_rig.known import fork_interface

HERE = Path(__file__).resolve().parent

# vllm/config/reasoning.py of the release with the patch applied: ReasoningConfig's init fields (pydantic,
# extra="forbid"); the patch adds the last one.
UPSTREAM_REASONING_KEYS = (*fork_interface.REASONING_CONFIG_KEYS, "default_thinking_token_budget")
BUDGET_KEY = "default_thinking_token_budget"


@dataclass(frozen=True)
class ServerInterface:
    line: str  # how an error line names the server
    flags_file: Path
    reasoning_keys: tuple[str, ...]
    budget_in_reasoning_config: bool  # else the fork's environment variable
    has_device_ids: bool  # else CUDA_VISIBLE_DEVICES

    def flags(self) -> frozenset[str]:
        return _flags(self.flags_file)

    def unknown_flags(self, names: list[str] | set[str]) -> list[str]:
        """The names (e.g. "--device-ids") this parser would refuse; '_' and '-' are one there."""
        known = self.flags()
        return sorted(n for n in names if n.split("=", 1)[0].replace("_", "-") not in known)

    def unknown_reasoning_keys(self, config: dict[str, object]) -> list[str]:
        return sorted(set(config) - set(self.reasoning_keys))


@cache
def _flags(path: Path) -> frozenset[str]:
    lines = path.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.startswith("-"))


FORK = ServerInterface(
    line=f"the pinned fork line ({fork_interface.FORK_LINE})",
    flags_file=fork_interface.FLAGS_FILE,
    reasoning_keys=fork_interface.REASONING_CONFIG_KEYS,
    budget_in_reasoning_config=False,
    has_device_ids=False,
)


def upstream_flags_file(version: str) -> Path:
    return HERE / f"upstream-{version}-cli-flags.txt"


def upstream(version: str) -> ServerInterface:
    """The patched release's interface; ValueError when its parser was never dumped into the project."""
    path = upstream_flags_file(version)
    if not path.is_file():
        dumped = sorted(p.name.split("-")[1] for p in HERE.glob("upstream-*-cli-flags.txt"))
        raise ValueError(
            f"vLLM {version}'s patched parser has not been dumped into vllm_rig/known/ ({path.name}): "
            f"its flags cannot be checked; flags are known for {', '.join(dumped)}"
        )
    return ServerInterface(
        line=f"vLLM {version} with the SM75 patch",
        flags_file=path,
        reasoning_keys=UPSTREAM_REASONING_KEYS,
        budget_in_reasoning_config=True,
        has_device_ids=True,
    )
