"""A bad --data value stops `pyinfra ... deploy.py` with one line and no traceback: the real CLI for the wiring
(valid settings pass, a bad value of each kind stops the run), and every rule through the same two steps in
process: pyinfra's own parser of a --data value, then the settings' validation (about 1.5 s less per value than
starting the CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from vllm_rig.validation import SettingsError, load_settings

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).with_name("pyinfra")

# KEY=VALUE as a user types it after --data, each breaking a different rule.
BAD = [
    "gpu_count=0",
    "nvidia_driver_version=580",
    "nvidia_driver_flavor=nouveau",
    "cuda_version=13.0",
    "flashinfer_version=0.6.12",
    "flashinfer_sm75_fix=pr3621",
    "vllm_version=0.26.0",
    "fork_ref=main",
    "git_mirror_prefix=https://proxy.example",
    "hf_endpoint=hf-mirror.com",
    "model_repo=Qwen3.8-27B-FP8",
    "model_dir=models/qwen",
    "vllm_host=everywhere",
    "vllm_port=70000",
    "vllm_api_key=hunter2",
    "tensor_parallel_size=4",
    "kv_cache_dtype=int8",
    "max_model_len=300000",
    "gpu_memory_utilization=1.5",
    "num_speculative_tokens=0",
    "cudagraph_mode=FULL",
    "cudagraph_capture_sizes=[8]",
    "gpu_power_limit_w=500",
    'vllm_extra_args=["--max-model-len=5000"]',
    "max_model_lenn=5000",
    "model=qwen39",
    "models_keep=-1",
    "fork_update_margin_pct=90",
]


def _deploy(*data: str) -> subprocess.CompletedProcess[str]:
    args = [str(PYINFRA), "-y", "@fake/x", "deploy.py", "--dry"]
    for item in data:
        args += ["--data", item]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)


def _settings_passed(run: subprocess.CompletedProcess[str]) -> None:
    """The settings passed and every stage was planned. @fake/x has no state to read, so its preflight
    fails and --dry exits 1 for it, as a real run would; that is the only failure allowed here."""
    out = run.stdout + run.stderr
    assert "preflight verdict for @fake/x: FAIL" in out and "could not read the host's state" in out, out
    assert run.returncode == 1 and "Traceback" not in out and "[@fake/x] Ready: deploy.py" in out, out


# Valid values that pyinfra's --data parsing turns into other types: cuda_version=12.8 and
# gpu_compute_capability=7.0 arrive as floats, device_ids=null as None.
OVERRIDES = [
    "max_model_len=131072",
    "kv_cache_dtype=auto",
    "gpu_power_limit_w=175",
    "cuda_version=12.8",
    "gpu_compute_capability=7.0",
    "device_ids=null",
]
CATALOGUE_MODEL = ["model=qwen38", "models_keep=0"]


def test_valid_overrides_pass_the_real_cli() -> None:
    """The wiring once, through the real CLI (about 7 s: every stage is planned); the defaults and a
    catalogue model go through the same two steps in process below."""
    _settings_passed(_deploy(*OVERRIDES))


@pytest.fixture(scope="module")
def parsed() -> dict[str, object]:
    """Each value as pyinfra's CLI parses a --data value (its parse_cli_arg), in a child process: importing
    pyinfra_cli patches the standard library with gevent's, which this test process must not have."""
    code = (
        "import json, sys; from pyinfra_cli.util import parse_cli_arg as p; "
        "print(json.dumps([p(v) for v in json.loads(sys.argv[1])]))"
    )
    items = BAD + OVERRIDES + CATALOGUE_MODEL
    values = [item.split("=", 1)[1] for item in items]
    out = subprocess.run([sys.executable, "-c", code, json.dumps(values)], capture_output=True, text=True, check=True)
    return dict(zip(items, json.loads(out.stdout), strict=True))


def _as_data(items: list[str], parsed: dict[str, object]) -> dict[str, object]:
    return {item.split("=", 1)[0]: parsed[item] for item in items}


@pytest.mark.parametrize("items", [[], CATALOGUE_MODEL, OVERRIDES], ids=["defaults", "catalogue", "overrides"])
def test_valid_values_pass(items: list[str], parsed: dict[str, object]) -> None:
    data = _as_data(items, parsed)
    settings = load_settings({**profile_data(), **data})
    for key, value in data.items():  # taken as given (a float's text: "12.8" is what the rules compare)
        assert str(getattr(settings, key)) == str(value), key


@pytest.mark.parametrize("item", BAD)
def test_bad_value_is_one_line_naming_it(item: str, parsed: dict[str, object]) -> None:
    key = item.split("=", 1)[0]
    with pytest.raises(SettingsError) as err:
        load_settings({**profile_data(), key: parsed[item]})  # as the CLI hands --data on
    lines = [line for line in err.value.lines if "\n" not in line]
    assert len(lines) == len(err.value.lines) == 1, err.value.lines
    assert lines[0].startswith(f"settings: {key}"), lines


# One rule on a single value, one across settings: what stops the real CLI.
@pytest.mark.parametrize("item", ["vllm_port=70000", "flashinfer_sm75_fix=pr3621"])
def test_bad_value_stops_the_real_cli_with_one_line(item: str) -> None:
    key = item.split("=", 1)[0]
    run = _deploy(item)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if "settings: " in line]
    assert len(lines) == 1, out
    assert f"settings: {key}" in lines[0]
