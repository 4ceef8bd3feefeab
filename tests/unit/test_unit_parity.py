"""The rendered unit against the two reference setups, flag by flag.

Allowed differences: paths (model, venv, FlashQLA, CUDA toolkit, working directory, check script, log),
the user, and cache/secret plumbing the seed did by hand (HOME, TORCH_EXTENSIONS_DIR, EnvironmentFile).
Where the fork's v0.1.x line spells the seed's intent differently (the first seed's box ran upstream vLLM
0.24 plus its owner's patch, not the fork: docs/runtime.md's "The fork kind against the real sources"), the seed is
translated first and the intent compared: `--device-ids 0,1` is CUDA_VISIBLE_DEVICES=0,1; the
`default_thinking_token_budget` key of `--reasoning-config` is, on the fork's line, the environment variable
its chat server reads (VLLM_DEFAULT_THINKING_TOKEN_BUDGET, the setting of that name). Everything else
(every flag, value, environment variable, restart and timeout setting) must match.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.systemd_split import parse_env_file, unquote_words
from tests.unit import seed_units
from tests.unit.groupdata import profile_data
from vllm_rig.core.systemd_quote import quote_word
from vllm_rig.known import fork_interface, server_interface
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.service.unit import environment_file, render_unit
from vllm_rig.validation import load_settings

PATH_FLAGS = {"--model"}
PATH_ENV = {"CUDA_HOME", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH"}
ADDED_ENV = {"HOME", "TORCH_EXTENSIONS_DIR"}  # stable cache homes for the service user


def _fork_spelling(
    seed_args: list[tuple[str, str | None]], seed_env: dict[str, str]
) -> tuple[list[tuple[str, str | None]], dict[str, str], int | None]:
    """The seed's flags and environment as the fork's line says the same thing, and the thinking budget the
    seed asked for (which that line reads from its environment, after the seed's own variables)."""
    args, env, budget = [], dict(seed_env), None
    for flag, value in seed_args:
        if flag == "--device-ids":
            items = list(env.items())
            at = [k for k, _ in items].index("HF_ENDPOINT") + 1 if "HF_ENDPOINT" in env else len(items)
            env = dict([*items[:at], ("CUDA_VISIBLE_DEVICES", value or ""), *items[at:]])
            continue
        if flag == "--reasoning-config" and value is not None:
            config = json.loads(value)
            budget = config.pop("default_thinking_token_budget", None)
            value = json.dumps(config, separators=(",", ":"))
            if budget is not None:
                env[fork_interface.THINKING_BUDGET_ENV] = str(budget)
        args.append((flag, value))
    return args, env, budget


def _settings(profile: str | None, **changes: object) -> Settings:
    """Both seeds on the fork kind (the first seed on its own, upstream, kind: tests/unit/test_upstream_unit.py)."""
    return load_settings({**profile_data(profile), "runtime_kind": "fork", **changes})


def _unit(s: Settings) -> str:
    return render_unit(s, Layout.of(s))


def _directives(unit: str) -> dict[str, list[str]]:
    """Key=value lines with backslash continuations joined, as systemd reads them."""
    text = re.sub(r"\\\n\s*", " ", unit)
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def _pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for word in argv:
        if word.startswith("--"):
            pairs.append((word, None))
        else:
            pairs[-1] = (pairs[-1][0], word)
    return pairs


def _argv(unit: str) -> list[str]:
    words = unquote_words(_directives(unit)["ExecStart"][0])
    assert words[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    return words[3:]


def _env(s: Settings) -> dict[str, str]:
    """The server's environment: the root-only file the unit names (the unit itself holds none)."""
    layout = Layout.of(s)
    assert "Environment" not in _directives(_unit(s))
    assert layout.environment_file in _directives(_unit(s))["EnvironmentFile"]
    return dict(parse_env_file(environment_file(s, layout)))


@pytest.mark.parametrize(
    ("profile", "seed_args"), [(None, seed_units.SEED1_ARGS), ("qwen38", seed_units.SEED2_ARGS)], ids=["seed1", "seed2"]
)
def test_flags_match_the_seed(profile: str | None, seed_args: list[tuple[str, str | None]]) -> None:
    s = _settings(profile, lan_serving="direct")  # the seeds served the LAN themselves, on 0.0.0.0
    rendered = dict(_pairs(_argv(_unit(s))))
    translated, _, budget = _fork_spelling(seed_args, {})
    expected = dict(translated)
    # The one flag the defaults change on purpose: qwen3_xml, the fork launcher's parser; qwen3_coder drops
    # streamed tool calls with reasoning on (README "Judgment calls", the start check's tool_call check).
    assert expected["--tool-call-parser"] in ("qwen3_coder", "qwen3_xml")
    expected["--tool-call-parser"] = "qwen3_xml"
    assert s.default_thinking_token_budget == budget  # seed 1's 4000, seed 2's none
    assert _env(s).get(fork_interface.THINKING_BUDGET_ENV) == (None if budget is None else str(budget))
    assert set(rendered) == set(expected)
    for flag, value in expected.items():
        if flag in PATH_FLAGS:
            continue
        if value is not None and value.startswith("{"):
            assert json.loads(rendered[flag]) == json.loads(value), flag
        else:
            assert rendered[flag] == value, flag


def test_behind_the_proxy_the_server_binds_loopback_only() -> None:
    """The default (lan_serving: proxy) differs from the seeds in one flag: nginx serves the LAN instead."""
    assert dict(_pairs(_argv(_unit(_settings(None)))))["--host"] == "127.0.0.1"
    assert dict(_pairs(_argv(_unit(_settings(None, lan_serving="direct", vllm_host="10.0.0.2")))))["--host"] == (
        "10.0.0.2"
    )


@pytest.mark.parametrize("profile", [None, "qwen38"])
def test_every_rendered_flag_is_one_the_fork_accepts(profile: str | None) -> None:
    flags = [word for word in _argv(_unit(_settings(profile))) if word.startswith("--")]
    assert flags and server_interface.FORK.unknown_flags(flags) == []


def test_the_seeds_own_spellings_are_refused_by_the_fork() -> None:
    """The two things the real fork rejects at argument parsing (exit 2) are what the translation removes."""
    assert server_interface.FORK.unknown_flags(["--device-ids"]) == ["--device-ids"]
    seed_config = json.loads(dict(seed_units.SEED1_ARGS)["--reasoning-config"] or "{}")
    assert server_interface.FORK.unknown_reasoning_keys(seed_config) == ["default_thinking_token_budget"]


def test_gpu_selection_is_cuda_visible_devices() -> None:
    assert _env(_settings(None))["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in _env(_settings("qwen38"))  # the second seed selects none


def test_model_path_comes_from_settings() -> None:
    s = _settings(None)
    assert dict(_pairs(_argv(_unit(s))))["--model"] == s.model_dir


def test_environment_matches_the_seed_in_order() -> None:
    env = _env(_settings(None))
    _, seed, _ = _fork_spelling(seed_units.SEED1_ARGS, seed_units.SEED1_ENV)
    assert [k for k in env if k not in ADDED_ENV] == list(seed)
    for name, value in seed.items():
        if name not in PATH_ENV:
            assert env[name] == value, name
    assert env["PATH"].endswith("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    assert env["CUDA_HOME"] == "/usr/local/cuda-12.9" and env["PYTHONPATH"].endswith("/src/flashqla")


def test_unit_settings_match_the_seed() -> None:
    d = _directives(_unit(_settings(None)))
    for key in ("Type", "Restart", "RestartSec", "TimeoutStartSec", "Wants", "WantedBy"):
        assert d[key] == [seed_units.SEED1_UNIT[key]], key
    assert d["After"][0].split()[0] == seed_units.SEED1_UNIT["After"]
    assert d["ExecStartPre"][0].endswith("/check-flashinfer-pr3621-sm75.sh")
    assert "StandardOutput" not in d  # the journal by default


def test_log_file_option_appends_like_the_seed() -> None:
    d = _directives(_unit(_settings(None, vllm_log_file="/var/log/vllm-8000.log")))
    assert d["StandardOutput"] == d["StandardError"] == ["append:/var/log/vllm-8000.log"]


def test_unit_requires_the_gpu_guard() -> None:
    d = _directives(_unit(_settings(None)))
    assert "vllm-rig-gpu-guard.service" in d["Requires"][0] and "vllm-rig-gpu-guard.service" in d["After"][0]


def test_api_key_never_on_the_command_line() -> None:
    unit = _unit(_settings(None))
    assert "--api-key" not in unit and "VLLM_API_KEY" not in unit
    assert _directives(unit)["EnvironmentFile"] == ["/etc/vllm-rig/vllm-environment.env", "/etc/vllm-rig/vllm.env"]


@pytest.mark.parametrize(
    "value",
    ['{"a":"100%"}', '{"path":"$HOME/x"}', '{"s":"two words"}', '{"q":"say \\"hi\\""}', "it's"],
)
def test_json_values_survive_systemd_quoting(value: str) -> None:
    s = _settings(None, override_generation_config={"k": value})
    rendered = dict(_pairs(_argv(_unit(s))))
    assert json.loads(rendered["--override-generation-config"]) == {"k": value}


@pytest.mark.parametrize("word", ["plain", "100%", "$VAR", "${VAR}", 'a "b" c', "back\\slash", "", "'single'"])
def test_quote_round_trip(word: str) -> None:
    assert unquote_words(quote_word(word)) == [word]


def test_the_first_seeds_budget_is_what_the_fork_reads() -> None:
    """The default profile's unit carries the first seed's 4000 as the variable the fork's serving.py reads
    (fork_interface.THINKING_BUDGET_ENV); null renders none, so the server gives no default."""
    assert _env(_settings(None))["VLLM_DEFAULT_THINKING_TOKEN_BUDGET"] == "4000"
    assert "VLLM_DEFAULT_THINKING_TOKEN_BUDGET" not in _unit(_settings(None, default_thinking_token_budget=None))
    assert _env(_settings(None, default_thinking_token_budget=1024))[fork_interface.THINKING_BUDGET_ENV] == ("1024")
