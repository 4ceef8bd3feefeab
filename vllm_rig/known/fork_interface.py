"""What the pinned fork line's server accepts: its command-line flags and the keys of its JSON config flags.

The flag list (fork-v0.1.x-cli-flags.txt beside this module) is the real parser of the fork's v0.1.x line
dumped option by option; its header says how, from what: the upstream vLLM 0.21.0 wheel (named with its
sha256) with the fork's arg_utils.py, make_arg_parser, every option string. A flag or key outside these
makes the real server exit with code 2 at argument parsing, before it loads anything, and systemd would
restart it forever: settings validation refuses it first, with one line (through server_interface.FORK,
which reads these and checks names against them for the fork kind).
"""

from __future__ import annotations

from pathlib import Path

from packaging.specifiers import SpecifierSet

FLAGS_FILE = Path(__file__).resolve().parent / "fork-v0.1.x-cli-flags.txt"

# vLLM 0.21.0 vllm/config/reasoning.py: ReasoningConfig's init fields (pydantic, extra="forbid").
REASONING_CONFIG_KEYS = ("reasoning_parser", "reasoning_start_str", "reasoning_end_str")

FORK_LINE = "v0.1.x (vLLM 0.21.0 base)"

# The fork's vllm/entrypoints/openai/chat_completion/serving.py (_default_thinking_token_budget; CHANGELOG
# v0.1.5 "service-level thinking budget defaults"): read once when the chat server starts, stripped, int();
# a chat request that sends no thinking_token_budget gets it. Empty or not an integer: no default.
THINKING_BUDGET_ENV = "VLLM_DEFAULT_THINKING_TOKEN_BUDGET"

# What the fork kind installs unless a setting names another: the torch index's cu128 lane of the fork's validated
# torch (its requirements/cuda.txt), and FlashInfer 0.6.16, the first release with the SM75 fix upstream merged
# (PR 3526): its head-size-256 prefill fits SM75's 64 KiB with FP16 and FP8 KV alike, so one release serves both
# profiles (the fork's own pin, 0.6.8.post1, is the fork_validated profile's). Its requirement overrides beside the
# fork's pins: group_data/all.py flashinfer_requirement_overrides (resolved by tests/real/test_real_resolver.py).
# The tool-call parser is the fork launcher's default: in the fork's vLLM 0.21.0 base qwen3_coder and qwen3_xml are
# two classes, and qwen3_coder drops streamed calls with reasoning on (peers-day-two notes, club-3090).
OWN_SETTINGS = {
    "torch_version": "2.11.0",
    "torchvision_version": "0.26.0",
    "torchaudio_version": "2.11.0",
    "flashinfer_version": "0.6.16",
    "triton_version": "3.6.0",
    "tool_call_parser": "qwen3_xml",
}

# culyun/vLLM-2080Ti-Definitive@399bb74d (the v0.1.17 state):pyproject.toml, [project] requires-python.
REQUIRES_PYTHON = SpecifierSet(">=3.10,<3.15")
