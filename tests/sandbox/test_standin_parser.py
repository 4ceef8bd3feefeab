"""The stand-in server's command line against the real one's (no sandbox machine needed).

The real side is data: ../shared/real-sources (the flag list and key tables, from the real fork) and
fixtures/forge/real_parser_outputs (what the real vLLM 0.21.0 server with the fork's arg_utils.py
printed, case by case; its README says how it was run). The stand-in runs from its source tree, as
`python -m vllm.entrypoints.openai.api_server` for exit codes and stderr, or imported for namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.sandbox import paths
from tests.sandbox.fixtures import forge
from tests.unit import seed_units

REAL_SOURCES = paths.REPO.parent / "shared" / "real-sources"
OUTPUTS = forge.HERE / "real_parser_outputs"
COPIED_FLAGS = forge.FORK_TREE / "vllm" / "standin" / "real" / "cli-flags.txt"
PARSER_DUMP = forge.FORK_TREE / "vllm" / "standin" / "real" / "parser.json"
SERVER = "vllm.entrypoints.openai.api_server"
BUDGET_KEYS = ("default_thinking_token_budget", "thinking_token_budget")


def real_source(name: str) -> Path:
    path = REAL_SOURCES / name
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: CI lays shared/ beside the checkout")
        pytest.skip(f"{path} is missing (shared/ is not beside this checkout)")
    return path


def listed_flags(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def case(name: str) -> dict:
    meta = json.loads((OUTPUTS / f"{name}.json").read_text())
    return {**meta, "stderr": (OUTPUTS / f"{name}.stderr").read_text()}


def cases(rc: int) -> list[str]:
    return sorted(p.stem for p in OUTPUTS.glob("*.json") if json.loads(p.read_text())["rc"] == rc)


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[ModuleType, ModuleType]]:
    """cli_args and api_server imported from the stand-in tree (stdlib only), then forgotten again."""
    sys.path.insert(0, str(forge.FORK_TREE))
    try:
        from vllm.entrypoints.openai import api_server, cli_args

        yield cli_args, api_server
    finally:
        sys.path.remove(str(forge.FORK_TREE))
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


def run_server(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The stand-in as the unit starts it; COLUMNS=80 as when the real outputs were captured."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(forge.FORK_TREE), "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", SERVER, *argv], cwd=cwd, env=env, capture_output=True, text=True)


def error_line(stderr: str) -> str:
    """From argparse's 'api_server.py: error:' to the end, with function addresses blanked."""
    text = stderr[stderr.index("api_server.py: error:") :]
    return re.sub(r" at 0x[0-9a-f]+>", " at 0x...>", text)


def raised(stderr: str) -> list[str]:
    """The exception a traceback ends with (its lines after the last frame), without the process prefix."""
    lines = [re.sub(r"^\(APIServer pid=\d+\) ", "", line) for line in stderr.splitlines()]
    last_frame = max(i for i, line in enumerate(lines) if line.startswith("  File "))
    start = next(i for i in range(last_frame + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def seed_argv(pairs: list[tuple[str, str | None]]) -> list[str]:
    argv: list[str] = []
    for flag, value in pairs:
        argv += [flag] if value is None else [flag, value]
    return argv


def without_the_two_bad_things(pairs: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The seed minus --device-ids and minus the budget key inside --reasoning-config."""
    out = []
    for flag, value in pairs:
        if flag == "--device-ids":
            continue
        if flag == "--reasoning-config":
            value = json.dumps({k: v for k, v in json.loads(value).items() if k not in BUDGET_KEYS})
        out.append((flag, value))
    return out


# --- the copied data is the real data --------------------------------------------------------------------
def test_copied_flag_list_equals_the_real_sources_file() -> None:
    assert COPIED_FLAGS.read_bytes() == real_source("fork-v0.1.x-cli-flags.txt").read_bytes()


def test_parser_dump_has_exactly_the_listed_flags_in_order() -> None:
    dump = json.loads(PARSER_DUMP.read_text())
    dumped = [option for action in dump["actions"] for option in action["option_strings"]]
    assert dumped == [flag for flag in listed_flags(COPIED_FLAGS) if flag != "-O"]  # -O is rewritten, no action


def test_the_stand_in_parser_registers_exactly_the_real_flags(standin) -> None:
    cli_args, _ = standin
    registered = set(cli_args.make_parser()._option_string_actions)
    assert registered == set(listed_flags(COPIED_FLAGS)) - {"-O"}


def key_tables(markdown: str) -> dict[str, list[str]]:
    """{class: keys} from the '| key | type | default |' tables under '-> `XConfig`' lines."""
    tables: dict[str, list[str]] = {}
    current = None
    in_key_table = False
    for line in markdown.splitlines():
        named = re.search(r"-> `(\w+Config)`", line)
        if named and not line.startswith("|"):
            current, in_key_table = named.group(1), False
        elif line.startswith("| key |"):
            in_key_table = current is not None
            tables.setdefault(current, [])
        elif in_key_table and (row := re.match(r"\| `(\w+)` \|", line)):
            tables[current].append(row.group(1))
        elif not line.startswith("|"):
            in_key_table = False
    return tables


def test_key_tables_equal_the_real_sources_file() -> None:
    tables = key_tables(real_source("fork-v0.1.x-config-keys.md").read_text())
    wanted = ["ReasoningConfig", "SpeculativeConfig", "CompilationConfig", "PassConfig", "DynamicShapesConfig"]
    assert sorted(tables) == sorted(wanted)
    dumped = json.loads(PARSER_DUMP.read_text())["config_keys"]
    for name in wanted:
        assert list(dumped[name]) == tables[name], name
    assert dumped["CompilationConfig"]["pass_config"] == "PassConfig"
    assert dumped["CompilationConfig"]["dynamic_shapes_config"] == "DynamicShapesConfig"


# --- every real flag is accepted, with the real semantics ------------------------------------------------
CONVERTERS = {o: a["type"] or "" for a in json.loads(PARSER_DUMP.read_text())["actions"] for o in a["option_strings"]}


def _value_for(flag: str, action: argparse.Action) -> str:
    """A value the real converter takes: the first choice, a number, a JSON object or a word."""
    if action.choices:
        return str(next(iter(action.choices)))
    converter = CONVERTERS[flag]
    if re.search(r"int|float|human_readable", converter):
        return "4"
    return "{}" if re.search(r"loads|dataclass|union_dict", converter) else "x"


@pytest.mark.parametrize("flag", listed_flags(COPIED_FLAGS))
def test_every_real_flag_is_accepted(flag: str, standin, capsys) -> None:
    cli_args, _ = standin
    parser = cli_args.make_parser(prog="api_server.py")
    if flag in ("-h", "--help"):
        with pytest.raises(SystemExit) as done:
            cli_args.parse_args([flag], prog="api_server.py")
        assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: api_server.py")
        return
    if flag == "-O":
        assert cli_args.parse_args(["-O3"]).optimization_level == "3"
        return
    action = parser._option_string_actions[flag]
    if isinstance(action, argparse.BooleanOptionalAction):
        argv, expected = [flag], not flag.startswith("--no-")
    elif action.nargs == 0:  # store_true
        argv, expected = [flag], True
    else:
        value = _value_for(flag, action)
        argv = [flag, value]
        converted = action.type(value) if action.type else value
        expected = [converted] if action.nargs == "+" or isinstance(action, argparse._AppendAction) else converted
    assert getattr(cli_args.parse_args(argv), action.dest) == expected


def test_flexible_spellings(standin) -> None:
    cli_args, _ = standin
    args = cli_args.parse_args(
        [
            "--max_model_len",
            "128k",
            "--no-async-scheduling",
            "--compilation-config.cudagraph_mode",
            "PIECEWISE",
            "--compilation-config.max_cudagraph_capture_size",
            "4",
            "--compilation-config.cudagraph_capture_sizes+",
            "1,2,4",
            "-O=1",
        ]
    )
    assert args.max_model_len == 128_000 and args.async_scheduling is False and args.optimization_level == "1"
    assert args.compilation_config == {
        "cudagraph_mode": "PIECEWISE",
        "max_cudagraph_capture_size": 4,
        "cudagraph_capture_sizes": ["1", "2", "4"],
    }


def test_dotted_keys_under_two_spellings_do_not_merge(standin) -> None:
    """Like the real parser: --compilation-config.x and -cc.y become two values of one flag; the last wins."""
    cli_args, _ = standin
    real = case("cc_dotted_ok_minimal")
    args = cli_args.parse_args(real["argv"])
    assert args.compilation_config == {"max_cudagraph_capture_size": 4}
    real_stdout = (OUTPUTS / "cc_dotted_ok_minimal.stdout").read_text()
    assert "'cudagraph_mode': None" in real_stdout and "'max_cudagraph_capture_size': 4" in real_stdout


# --- refused at parse time: exit 2, the real text --------------------------------------------------------
@pytest.mark.parametrize("name", cases(rc=2))
def test_parse_time_refusal_matches_the_real_server(name: str, tmp_path: Path) -> None:
    real = case(name)
    proc = run_server(real["argv"], tmp_path)
    assert proc.returncode == 2
    assert error_line(proc.stderr) == error_line(real["stderr"])
    if sys.version_info[:2] == (3, 11):  # the usage text wraps as argparse of the capturing Python did
        assert re.sub(r" at 0x[0-9a-f]+>", "", proc.stderr) == re.sub(r" at 0x[0-9a-f]+>", "", real["stderr"])


def test_device_ids_is_an_unrecognized_argument(tmp_path: Path) -> None:
    argv = seed_argv([pair for pair in without_the_two_bad_things(seed_units.SEED1_ARGS)]) + ["--device-ids", "0,1"]
    proc = run_server(argv, tmp_path)
    # '0,1' is taken by the optional positional model_tag, so only the flag is left over.
    assert proc.returncode == 2
    assert proc.stderr.endswith("api_server.py: error: unrecognized arguments: --device-ids\n")
    assert case("seed000_device_ids")["stderr"].endswith("api_server.py: error: unrecognized arguments: --device-ids\n")


@pytest.mark.parametrize("key", BUDGET_KEYS)
def test_a_budget_key_in_reasoning_config_is_refused(key: str, tmp_path: Path) -> None:
    config = {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>", key: 4000}
    proc = run_server(["--model", "m", "--reasoning-config", json.dumps(config)], tmp_path)
    assert proc.returncode == 2
    assert error_line(proc.stderr) == (
        "api_server.py: error: argument --reasoning-config: 1 validation error for ReasoningConfig\n"
        f"{key}\n"
        "  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=4000, input_type=int]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/unexpected_keyword_argument\n"
    )
    real = "seed000_budget_key" if key == "default_thinking_token_budget" else "seed000_thinking_token_budget"
    assert error_line(case(real)["stderr"]) == error_line(proc.stderr)


def test_as_rendered_now_the_reasoning_config_error_comes_first(tmp_path: Path) -> None:
    proc = run_server(seed_argv(seed_units.SEED1_ARGS), tmp_path)
    assert proc.returncode == 2 and "default_thinking_token_budget\n  Unexpected keyword argument" in proc.stderr
    assert error_line(proc.stderr) == error_line(case("seed000_as_rendered")["stderr"])


# --- refused at start: exit 1, the real exception -------------------------------------------------------
START_REFUSALS = [
    "sc_unknown_key_seed000",
    "sc_nested_unknown_minimal",
    "tool_parser_bogus",
    "quantization_bogus",
    "reasoning_parser_bogus_tokenizer",
]


@pytest.mark.parametrize("name", START_REFUSALS)
def test_start_time_refusal_matches_the_real_server(name: str, tmp_path: Path) -> None:
    real = case(name)
    assert real["rc"] == 1
    argv = list(real["argv"])
    argv[argv.index("--model") + 1] = str(OUTPUTS / "model")  # config.json only: start stops before weights
    if "--port" in argv:
        argv[argv.index("--port") + 1] = str(free_port())
    proc = run_server(argv, tmp_path)
    assert proc.returncode == 1
    assert raised(proc.stderr) == raised(real["stderr"])
    assert re.match(r"\(APIServer pid=\d+\) ", proc.stderr.splitlines()[-1])  # vLLM prefixes its process's lines


def test_speculative_keys_pass_the_parser_and_fail_at_engine_start(standin) -> None:
    cli_args, api_server = standin
    spec = {"method": "mtp", "num_speculative_tokens": 3, "bogus": 1}
    args = cli_args.parse_args(["--model", "m", "--speculative-config", json.dumps(spec)])
    assert args.speculative_config == spec
    with pytest.raises(cli_args.ValidationError) as refused:
        api_server.check_engine_config(args)
    assert type(refused.value).__module__ + ".ValidationError" == "pydantic_core._pydantic_core.ValidationError"
    real = raised(case("sc_unknown_key_minimal")["stderr"])
    assert ["pydantic_core._pydantic_core.ValidationError: " + str(refused.value).splitlines()[0]] == real[:1]
    assert str(refused.value).splitlines()[1:] == real[1:]


def test_unknown_reasoning_parser_with_both_strings_waits_for_the_engine_core(standin) -> None:
    """With start and end strings the config needs no parser; the real server got past the engine config
    (it failed later, in its engine core, on this weightless model). The stand-in fails in the engine phase."""
    cli_args, api_server = standin
    real = case("reasoning_parser_bogus_with_strs")
    assert real["rc"] == 1 and "Engine core initialization failed" in real["stderr"]
    assert "Reasoning parser" not in real["stderr"]
    args = cli_args.parse_args(["--model", "m", *real["argv"][2:]])
    api_server.check_engine_config(args)  # does not raise
    assert api_server.unknown_reasoning_parser(args) == raised(case("reasoning_parser_bogus_tokenizer")["stderr"])[
        0
    ].removeprefix("KeyError: ").strip('"')


# --- accepted with any key -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flag", "real"),
    [
        ("--additional-config", "additional_config_any_key_minimal"),
        ("--override-generation-config", "ogc_any_key_minimal"),
        ("--default-chat-template-kwargs", "dctk_any_key_minimal"),
    ],
)
def test_free_form_json_flags_take_any_key(flag: str, real: str, standin) -> None:
    cli_args, _ = standin
    args = cli_args.parse_args(["--model", "m", flag, '{"bogus": 1}'])
    assert getattr(args, flag[2:].replace("-", "_")) == {"bogus": 1}
    # The real server got past its parser with the same flag: it stopped later, at the speculative config.
    assert case(real)["rc"] == 1 and "validation error for SpeculativeConfig" in case(real)["stderr"]


def test_additional_config_not_shaped_like_json_stays_a_string(standin) -> None:
    cli_args, _ = standin
    assert cli_args.parse_args(["--additional-config", "plain"]).additional_config == "plain"


# --- the reference command lines -------------------------------------------------------------------------
def test_seed_000_without_the_two_bad_things_parses(standin) -> None:
    cli_args, _ = standin
    args = cli_args.parse_args(seed_argv(without_the_two_bad_things(seed_units.SEED1_ARGS)))
    assert args.tensor_parallel_size == 2 and args.kv_cache_dtype == "fp8_e4m3" and args.max_model_len == 100_000
    assert args.reasoning_config == {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>"}
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}
    assert args.compilation_config["cudagraph_capture_sizes"] == [4] and args.async_scheduling is False
    assert args.default_chat_template_kwargs == {"enable_thinking": True} and args.disable_uvicorn_access_log is True
    assert args.served_model_name == ["qwen-local"] and args.model_tag is None
    # The real server parsed the same line and went on to the engine config (this scratch model has no MTP).
    assert (
        case("seed000_clean")["rc"] == 1 and "Unsupported speculative method: 'mtp'" in case("seed000_clean")["stderr"]
    )


def test_seed_002_parses(standin) -> None:
    cli_args, _ = standin
    args = cli_args.parse_args(seed_argv(seed_units.SEED2_ARGS))
    assert args.mamba_cache_mode == "align" and args.generation_config == "vllm" and args.max_model_len == 131_072
    assert args.tool_call_parser == "qwen3_xml" and args.enable_auto_tool_choice is True
    assert args.additional_config == {"gdn_prefill_backend": "flashqla_legacy"}
    assert case("seed002")["rc"] == 1 and "Unsupported speculative method: 'mtp'" in case("seed002")["stderr"]


# --- the deploy's own command line -----------------------------------------------------------------------
@pytest.mark.parametrize("profile", [None, "qwen38"], ids=["default", "qwen38"])
def test_the_deploys_rendered_command_parses(profile: str | None, standin, capsys) -> None:
    """What the unit's ExecStart runs must get past the real parser (exit 2 there is a restart loop)."""
    from tests.unit.test_unit_parity import _argv, _settings, _unit

    cli_args, _ = standin
    argv = _argv(_unit(_settings(profile)))
    try:
        cli_args.parse_args(argv, prog="api_server.py")
    except SystemExit as exc:
        pytest.fail(f"exit {exc.code}: {error_line(capsys.readouterr().err)}")
