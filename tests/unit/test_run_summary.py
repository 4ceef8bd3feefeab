"""The end-of-run summary: each stage's changes and time, and the next step from the settings and the host's
connection data (the address this machine uses, the LAN port, the served name, the key, the CA, curl)."""

from __future__ import annotations

import shlex

from tests.unit.groupdata import profile_data
from vllm_rig.core.run_summary import StageRun, stage_of
from vllm_rig.settings import Settings
from vllm_rig.stages.summary.deploy import next_step_lines, stage_lines
from vllm_rig.validation import load_settings

CONN = {
    "name": "gpubox",
    "ssh_hostname": "192.168.1.50",
    "ssh_user": "ubuntu",
    "ssh_port": 2222,
    "ssh_key": "/home/me/.ssh/id_ed25519",
}


def _settings(**overrides: object) -> Settings:
    return load_settings({**profile_data(), **overrides})


def test_the_next_step_names_the_real_host_the_lan_port_the_model_the_key_and_the_ca() -> None:
    lines = next_step_lines(CONN, _settings())
    assert lines[0] == 'clients use https://192.168.1.50:8443/v1 (the OpenAI API) with the model name "qwen-local"'
    assert lines[1].startswith("clients trust the local CA lan-ca/gpubox-ca.crt")
    assert lines[2] == (
        "the API key is VLLM_API_KEY in /etc/vllm-rig/vllm.env on the box (root only); read it: "
        "KEY=$(ssh -i /home/me/.ssh/id_ed25519 -p 2222 ubuntu@192.168.1.50 sudo sed -n "
        "'s/^VLLM_API_KEY=//p' /etc/vllm-rig/vllm.env)"
    )
    assert "<this host>" not in "\n".join(lines)


def test_with_client_keys_the_next_step_says_where_they_are_read_never_a_key() -> None:
    lines = next_step_lines(CONN, _settings(api_keys=["laptop", "chat-page"]))
    [said] = [line for line in lines if line.startswith("each client's own key")]
    assert said == (
        "each client's own key (laptop, chat-page) is on the box, root only: laptop's is read with "
        "ssh -i /home/me/.ssh/id_ed25519 -p 2222 ubuntu@192.168.1.50 sudo cat /etc/vllm-rig/keys/laptop; "
        "bin/rig keys list shows them all"
    )
    assert lines[-1].startswith("try it: ")  # the curl line stays last
    assert not any(line.startswith("each client") for line in next_step_lines(CONN, _settings()))


def test_the_curl_line_is_one_shell_command_that_sends_the_key_and_the_served_name() -> None:
    curl = next_step_lines(CONN, _settings(lan_port=9443))[-1].removeprefix("try it: ")
    argv = shlex.split(curl.replace('"Authorization: Bearer $KEY"', "'Authorization: Bearer K'"))
    assert argv[:4] == ["curl", "-sS", "--fail-with-body", "--cacert"] and argv[4] == "lan-ca/gpubox-ca.crt"
    assert argv[-1] == "https://192.168.1.50:9443/v1/chat/completions"
    assert "Authorization: Bearer K" in argv and '"model": "qwen-local"' in argv[argv.index("-d") + 1]


def test_a_catalogue_model_is_the_name_sent() -> None:
    assert '"qwen38-27b"' in next_step_lines(CONN, _settings(**profile_data("qwen38")))[0]


def test_a_root_login_reads_the_key_without_sudo() -> None:
    lines = next_step_lines({**CONN, "ssh_user": "root", "ssh_port": 22}, _settings())
    assert "KEY=$(ssh -i /home/me/.ssh/id_ed25519 root@192.168.1.50 sed -n " in lines[2]


def test_direct_serving_is_plain_http_on_the_server_port() -> None:
    lines = next_step_lines(CONN, _settings(lan_serving="direct", vllm_host="0.0.0.0"))
    assert lines[0].startswith("clients use http://192.168.1.50:8000/v1 ")
    assert "--cacert" not in lines[-1] and lines[-1].endswith("http://192.168.1.50:8000/v1/chat/completions")


def test_no_key_no_key_line() -> None:
    lines = next_step_lines(CONN, _settings(vllm_api_key="none", lan_serving="direct"))
    assert not any("API key" in line for line in lines) and "$KEY" not in lines[-1]


def test_stage_lines_say_what_changed_and_how_long() -> None:
    stages = [
        StageRun("Preflight", 2, [], 1.25),
        StageRun("Driver", 9, ["apt and modprobe", "NVIDIA driver 580", "Hold", "Reboot"], 100.0),
    ]
    assert stage_lines(stages) == [
        "Preflight: no change (2 operations); 1.2 s",
        "Driver: 4 of 9 operations changed: apt and modprobe, NVIDIA driver 580, Hold and 1 more; 100.0 s",
        "this run: 101.2 s in 2 stages",
    ]


def test_an_operation_belongs_to_the_stage_after_its_task_file() -> None:
    assert stage_of("tasks/driver.py | Driver | Hold the driver packages") == "Driver"
    assert stage_of("Logs | The service log") == "Logs"
