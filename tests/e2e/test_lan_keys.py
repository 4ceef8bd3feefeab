"""A key for each client (api_keys, bin/rig keys) on the sandbox rig, from the LAN namespace of
tests/e2e/test_lan_stage.py: real nginx from Debian's archive, the stand-in server checking its own key
(the real one's --api-key / VLLM_API_KEY handling). Each client key gets in and the server is sent its own key;
adding and revoking one leaves the others working and never restarts the server; the access log names each
request's key, never a key; a deploy whose settings still name a revoked key does not make it again."""

from __future__ import annotations

import shlex

import pytest

from tests.conftest import Rig
from tests.e2e import service
from tests.e2e.deploys import DeployRun, deploy, forget_lan_ca, serving_rig
from tests.e2e.test_lan_stage import BOX, DATA, https, lan, status  # noqa: F401 (lan: the namespace fixture)
from vllm_rig import paths as rig_paths

pytestmark = pytest.mark.sandbox

KEYS = {**DATA, "api_keys": ["laptop", "chat-page"]}
RUNS: dict[str, DeployRun] = {}


def _key(rig: Rig, name: str) -> str:
    return rig.ssh("rig1", f"sudo cat {shlex.quote(f'{rig_paths.KEYS_DIR}/{name}')}").strip()


def _server_start(rig: Rig, name: str = "rig1") -> str:
    """The server's MainPID and when it started: the same two values mean no restart."""
    return rig.ssh(name, "systemctl show vllm -p MainPID -p ExecMainStartTimestampMonotonic").strip()


def _answers(key: str) -> int | str:
    return status(https(BOX, "/v1/models", key=key))


def test_api_keys_are_made_on_the_box_and_each_gets_in(rig: Rig, lan: str) -> None:  # noqa: F811
    serving_rig(rig)  # keys only add to a serving box: an earlier module's whole deploy, kept, will do
    forget_lan_ca(rig)  # its CA re-made to sign this module's client network too
    run = deploy(rig, "deploy.py", data=KEYS)
    RUNS["fresh"] = run
    assert run.ok, run.log[-3000:]
    modes = rig.ssh("rig1", f"sudo stat -c '%n %a %U' {rig_paths.KEYS_DIR} {rig_paths.KEYS_DIR}/laptop "
                    f"{rig_paths.KEYS_DIR}/chat-page")  # fmt: skip
    assert [line.split()[1:] for line in modes.splitlines()] == [["700", "root"], ["600", "root"], ["600", "root"]]
    laptop, chat, server = _key(rig, "laptop"), _key(rig, "chat-page"), service.api_key(rig)
    assert len({laptop, chat, server}) == 3
    for key in (laptop, chat):
        assert key not in run.log and key not in rig.ssh("rig1", "ps -eo args")
    # The stand-in server knows only its own key: a client key answers 200 only because nginx sent the server's.
    assert _answers(laptop) == 200 and _answers(chat) == 200 and _answers(server) == 200
    for wrong in (laptop[:-1], chat + "x", "laptop", "chat-page"):
        assert _answers(wrong) == 401, wrong
    assert status(https(BOX, "/v1/models")) == 401
    # The summary says how to read the server's key; the client keys are read on the box (docs say the path).
    assert rig.ssh("rig1", "sudo grep -c ' laptop;' /etc/vllm-rig/lan/api-key.conf").strip() == "1"


def test_adding_a_key_reloads_nginx_and_restarts_no_server(rig: Rig, lan: str) -> None:  # noqa: F811
    if "fresh" not in RUNS:
        pytest.skip("the fresh deploy did not run")
    before = _server_start(rig)
    laptop, chat = _key(rig, "laptop"), _key(rig, "chat-page")
    run = deploy(rig, "tasks/keys.py", data={**KEYS, "keys_action": "add", "keys_name": "agent"})
    assert run.ok, run.log[-3000:]
    agent = _key(rig, "agent")
    assert agent not in run.log
    assert f"cat {rig_paths.KEYS_DIR}/agent" in run.log  # how to read it on the box
    assert _answers(agent) == 200 and _answers(laptop) == 200 and _answers(chat) == 200
    assert _server_start(rig) == before
    # Adding it again changes nothing and keeps the key.
    again = deploy(rig, "tasks/keys.py", data={**KEYS, "keys_action": "add", "keys_name": "agent"})
    assert again.ok and again.changed == [], again.changed
    assert _key(rig, "agent") == agent


def test_revoking_a_key_refuses_it_and_leaves_the_others(rig: Rig, lan: str) -> None:  # noqa: F811
    if "fresh" not in RUNS:
        pytest.skip("the fresh deploy did not run")
    before = _server_start(rig)
    laptop, chat, agent = _key(rig, "laptop"), _key(rig, "chat-page"), _key(rig, "agent")
    run = deploy(rig, "tasks/keys.py", data={**KEYS, "keys_action": "revoke", "keys_name": "laptop"})
    assert run.ok, run.log[-3000:]
    assert _answers(laptop) == 401
    assert _answers(chat) == 200 and _answers(agent) == 200 and _answers(service.api_key(rig)) == 200
    assert _server_start(rig) == before
    # A deploy whose api_keys still names laptop says so and does not make it again; agent (added by hand) stays.
    redeploy = deploy(rig, "tasks/lan.py", data=KEYS)
    assert redeploy.ok, redeploy.log[-3000:]
    assert "api_keys names laptop, revoked on the box" in redeploy.log
    assert rig.ssh("rig1", f"sudo test -e {rig_paths.KEYS_DIR}/laptop && echo there || echo gone").strip() == "gone"
    assert _answers(laptop) == 401 and _answers(agent) == 200 and _answers(chat) == 200
    assert redeploy.changed == [], redeploy.changed
    assert _server_start(rig) == before


def test_the_access_log_names_each_key_and_keys_list_counts_them(rig: Rig, lan: str) -> None:  # noqa: F811
    if "fresh" not in RUNS:
        pytest.skip("the fresh deploy did not run")
    keys = {name: _key(rig, name) for name in ("chat-page", "agent")}
    first = deploy(rig, "tasks/keys.py", data=KEYS)  # list: marks the read
    assert first.ok, first.log[-3000:]
    for _ in range(3):
        assert _answers(keys["agent"]) == 200
    assert _answers(keys["chat-page"]) == 200
    assert _answers("not-a-key") == 401
    log = rig.ssh("rig1", f"sudo tail -n 5 {rig_paths.LAN_ACCESS_LOG}")
    assert [line.split()[1] for line in log.splitlines()] == ["key=agent"] * 3 + ["key=chat-page", "key=-"], log
    whole = rig.ssh("rig1", f"sudo cat {rig_paths.LAN_ACCESS_LOG}")
    for key in (*keys.values(), service.api_key(rig)):
        assert key not in whole
    listing = deploy(rig, "tasks/keys.py", data=KEYS)
    assert listing.ok, listing.log[-3000:]
    lines = {line.split("] ", 1)[-1].split()[0]: line for line in listing.log.splitlines() if "request(s)" in line}
    assert lines["agent"].rstrip().endswith("3 request(s)") and lines["chat-page"].rstrip().endswith("1 request(s)")
    assert not any(key in listing.log for key in keys.values())
    # Read again at once: nothing since this read.
    after = deploy(rig, "tasks/keys.py", data=KEYS)
    assert "agent" in after.log and not any(
        line.rstrip().endswith(" 3 request(s)") for line in after.log.splitlines() if "agent" in line
    )
    # bin/rig status shows the requests per key since its last read (here: the keys list's).
    for _ in range(2):
        assert _answers(keys["agent"]) == 200
    shown = deploy(rig, "tasks/status.py", data=KEYS)
    assert shown.ok, shown.log[-3000:]
    assert "agent 2, chat-page 0" in shown.log, shown.log[-3000:]
