"""What would stop a real box, reintroduced on the sandbox: each fails the way the real fork and pip fail.

The stand-in server parses like the fork's real v0.1.x parser (tests/STANDIN_SOURCES.md) and the sandbox
index carries the real wheels' dependency metadata, so the reference box's own spellings and the fork's
unmodified pins fail here with the real error text; with this project's defaults the deploy ends in a
proven service.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import deploy, serving_rig
from tests.systemd_split import parse_env_file, unquote_words

pytestmark = pytest.mark.sandbox
REAL_OUTPUTS = Path(__file__).resolve().parents[1] / "sandbox" / "fixtures" / "forge" / "real_parser_outputs"
UNIT = "/etc/systemd/system/vllm.service"
SEED_REASONING = '{"reasoning_start_str":"<think>","reasoning_end_str":"</think>","default_thinking_token_budget":4000}'


@pytest.fixture(scope="module")
def serving(rig: Rig) -> Rig:
    return serving_rig(rig)  # the defaults after a whole deploy (an earlier module's, kept, when there is one)


def _unit_lines(rig: Rig) -> list[str]:
    text = rig.ssh("rig1", f"cat {UNIT}").replace("\\\n", " ")
    return text.splitlines()


def _server_command(rig: Rig) -> tuple[dict[str, str], list[str]]:
    """The deployed unit's environment and argv, as systemd reads them."""
    env: dict[str, str] = {}
    argv: list[str] = []
    env.update(parse_env_file(rig.ssh("rig1", "sudo cat /etc/vllm-rig/vllm-environment.env")))  # not in the unit
    for line in _unit_lines(rig):
        if line.startswith("ExecStart="):
            argv = unquote_words(line.split("=", 1)[1])
    return env, argv


def _run_as_service_user(rig: Rig, env: dict[str, str], argv: list[str]) -> tuple[int, str]:
    words = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    command = " ".join(shlex.quote(w) for w in argv)
    out = rig.ssh(
        "rig1",
        f"cd /tmp && sudo -u vllm env -i {words} timeout 120 {command} > /tmp/start.out 2>&1; echo rc=$?; "
        "cat /tmp/start.out",
        check=False,
    )
    first, _, rest = out.partition("\n")
    return int(first.removeprefix("rc=")), rest


def _with_port(argv: list[str], port: str = "18999") -> list[str]:
    argv = list(argv)
    argv[argv.index("--port") + 1] = port
    return argv


def _real_error(case: str) -> str:
    """The last line(s) the real parser printed for this case (after its usage text)."""
    stderr = (REAL_OUTPUTS / f"{case}.stderr").read_text()
    return stderr[stderr.index("api_server.py: error:") :].strip()


def test_defaults_serve_and_render_only_what_the_fork_accepts(serving: Rig) -> None:
    env, argv = _server_command(serving)
    assert "--device-ids" not in argv and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "default_thinking_token_budget" not in " ".join(argv)
    assert env["VLLM_DEFAULT_THINKING_TOKEN_BUDGET"] == "4000"  # the seed's budget, as the fork's serving.py reads it
    assert serving.ssh("rig1", "systemctl is-active vllm").strip() == "active"


def test_the_old_gpu_flag_stops_the_server_with_the_real_parsers_words(serving: Rig) -> None:
    env, argv = _server_command(serving)
    rc, out = _run_as_service_user(serving, env, [*_with_port(argv), "--device-ids", "0,1"])
    assert rc == 2, out[-2000:]
    assert _real_error("device_ids_last") in out  # "api_server.py: error: unrecognized arguments: --device-ids"


def test_the_old_budget_key_stops_the_server_with_the_real_parsers_words(serving: Rig) -> None:
    env, argv = _server_command(serving)
    argv = _with_port(argv)
    argv[argv.index("--reasoning-config") + 1] = SEED_REASONING
    rc, out = _run_as_service_user(serving, env, argv)
    assert rc == 2, out[-2000:]
    expected = _real_error("seed000_budget_key")
    # The docs link names the pydantic release the real run used; the rest is byte for byte.
    assert expected.split("    For further information")[0] in out


def test_a_runtime_without_torchvision_fails_to_start_like_transformers_says(serving: Rig) -> None:
    env, argv = _server_command(serving)
    site = serving.ssh(
        "rig1", f"{argv[0]} -c 'import torchvision, os; print(os.path.dirname(os.path.dirname(torchvision.__file__)))'"
    ).strip()
    aside = "/var/tmp/torchvision-aside"
    move_out = f"sudo mkdir -p {aside} && sudo mv {site}/torchvision {site}/torchvision-*.dist-info {aside}/"
    serving.ssh("rig1", move_out)
    try:
        rc, out = _run_as_service_user(serving, env, _with_port(argv))
    finally:
        serving.ssh("rig1", f"sudo mv {aside}/* {site}/ && sudo rmdir {aside}")
    assert rc == 1, out[-2000:]
    assert "Qwen3VLVideoProcessor requires the Torchvision library but it was not found in your environment." in out
    assert serving.ssh("rig1", "systemctl is-active vllm").strip() == "active"  # the service was never touched


def test_flashinfer_0614_with_the_forks_unmodified_pins_fails_the_build_naming_the_conflict(serving: Rig) -> None:
    current = serving.ssh("rig1", "readlink /opt/vllm-rig/current").strip()
    fp16 = {"flashinfer_version": "0.6.14", "kv_cache_dtype": "auto", "models": {}}  # PR 3621: FP16 KV only
    run = deploy(serving, "deploy.py", data={**fp16, "flashinfer_requirement_overrides": {"0.6.14": {}}})
    assert not run.ok
    # The set is resolved (by uv, for its hashed lock) on this machine before any host is touched: the line says
    # the conflict in the resolver's words.
    said = " ".join(run.log.split())  # pyinfra's column wraps long lines
    assert "none could be written: uv could not resolve" in said
    assert "flashinfer-python==0.6.14 depends on nvidia-cutlass-dsl>=4.5.0" in said
    assert serving.ssh("rig1", "readlink /opt/vllm-rig/current").strip() == current  # the old runtime serves
    assert serving.ssh("rig1", "systemctl is-active vllm").strip() == "active"
