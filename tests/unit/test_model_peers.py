"""Which host of a run fetches the model from which (vllm_rig/stages/model/peers.py's plan_roles), and the
peer server's tokens and idle end."""

from __future__ import annotations

import shlex
from types import SimpleNamespace
from typing import Any

from vllm_rig.host.model_serve import Followers, follower_token
from vllm_rig.settings import Settings
from vllm_rig.stages.model.operations import ServeSpec
from vllm_rig.stages.model.peers import PEER_IDLE_S, PeerRole, plan_roles, run_token, token_for
from vllm_rig.validation import load_settings

from .test_settings import _with


def hosts(*names: str, **data: dict[str, Any]) -> list[Any]:
    return [SimpleNamespace(name=n, data=data.get(n, {"ssh_hostname": f"10.0.0.{i + 1}"})) for i, n in enumerate(names)]


ASKED: list[str] = []  # whose ModelFetch fact plan_roles read, in the last call


def roles(members: list[Any], held: frozenset[str] = frozenset(), **per_host: dict[str, Any]) -> dict[str, PeerRole]:
    settings = {h.name: load_settings(_with(**per_host.get(h.name, {}))) for h in members}
    ASKED.clear()

    def holds(h: Any, s: Settings) -> bool:
        ASKED.append(h.name)
        return h.name in held

    return plan_roles(members, lambda h: settings[h.name], holds)


def test_two_fresh_hosts_the_first_in_inventory_order_fetches_and_serves_the_second() -> None:
    found = roles(hosts("rig1", "rig2"))
    assert found["rig1"] == PeerRole(serve_to=("rig2",))
    assert found["rig2"] == PeerRole(source="rig1", url="http://10.0.0.1:28480")
    assert found["rig2"].fetch_arg == "rig1=http://10.0.0.1:28480"


def test_a_host_that_holds_the_model_serves_even_when_listed_later() -> None:
    found = roles(hosts("new1", "old", "new2"), held=frozenset({"old"}))
    assert found["old"].serve_to == ("new1", "new2")
    assert found["new1"].source == found["new2"].source == "old"


def test_nothing_to_do_when_every_host_holds_it_or_a_host_is_alone() -> None:
    assert roles(hosts("rig1", "rig2"), held=frozenset({"rig1", "rig2"})) == {}
    assert roles(hosts("rig1")) == {}
    assert ASKED == []  # a host alone costs no remote command


def test_other_models_and_hosts_with_peers_off_are_apart() -> None:
    other = {"model_repo": "acme/other"}
    found = roles(hosts("rig1", "rig2", "rig3"), rig2=other, rig3={"model_peers": False})
    assert found == {} and ASKED == []
    found = roles(hosts("rig1", "rig2", "rig3"), rig1=other, rig3=other)
    assert found["rig1"].serve_to == ("rig3",) and "rig2" not in found


def test_the_address_setting_and_ipv6_literals() -> None:
    found = roles(hosts("rig1", "rig2"), rig1={"model_peer_address": "192.168.1.20", "model_peer_port": 9000})
    assert found["rig2"].url == "http://192.168.1.20:9000"
    found = roles(hosts("rig1", "rig2", rig1={"ssh_hostname": "fd00::5"}, rig2={}))
    assert found["rig2"].url == "http://[fd00::5]:28480"
    found = roles(hosts("rig1", "rig2", rig1={}, rig2={}))
    assert found["rig2"].url == "http://rig1:28480"  # no ssh_hostname: the inventory name


# ---- the peer server's tokens and its own end (vllm_rig/host/model_serve.py), issue 23


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


RUN = "run-token-" + "r" * 30


def test_each_follower_has_its_own_token_and_the_runs_own_is_none_of_them() -> None:
    followers = Followers(RUN, ["rig2", "rig3"])
    assert followers.of(follower_token(RUN, "rig2")) == "rig2"
    assert followers.of(follower_token(RUN, "rig3")) == "rig3"
    assert follower_token(RUN, "rig2") != follower_token(RUN, "rig3")
    for refused in (RUN, "", follower_token(RUN, "rig4"), follower_token("another-run-" + "r" * 30, "rig2")):
        assert followers.of(refused) is None, refused


def test_the_server_has_a_reason_to_stop_once_every_follower_is_done() -> None:
    followers = Followers(RUN, ["rig2", "rig3"], clock=Clock())
    assert followers.stop_reason() is None
    assert followers.done("rig2") == ["rig3"] and "rig2" in followers.finished
    assert followers.stop_reason() is None
    assert followers.done("rig2") == ["rig3"]  # said twice (a resumed fetch): still one follower
    with followers.serving():  # rig3's POST /v1/done: it is answered before the server stops
        assert followers.done("rig3") == []
        assert followers.stop_reason() is None
    assert followers.changed.is_set()  # the watcher is woken once that answer has gone
    assert followers.stop_reason() == "every follower (rig2, rig3) reported done"


def test_idle_means_no_request_for_a_while_and_none_in_flight() -> None:
    clock = Clock()
    followers = Followers(RUN, ["rig2"], idle_exit_s=120, clock=clock, first_ask_s=900)
    clock.now += 899  # before the first request it waits longer: a follower may hash its staging first
    assert followers.stop_reason() is None
    clock.now += 1
    assert followers.stop_reason() == "no follower asked within 900 s of the start"
    clock.now = 1000.0
    followers = Followers(RUN, ["rig2"], idle_exit_s=120, clock=clock, first_ask_s=900)
    with followers.serving():  # a request ends the idle time
        clock.now += 600  # sending a large file for ten minutes is not idle
        assert followers.stop_reason() is None
    assert followers.stop_reason() is None  # the idle time starts when that request ended
    clock.now += 120
    assert followers.stop_reason() == "no follower asked for 120 s"


def test_the_source_holds_the_runs_token_each_follower_its_own_and_the_server_is_told_its_followers() -> None:
    source, follower = PeerRole(serve_to=("rig2", "rig3")), PeerRole(source="rig1", url="http://10.0.0.1:28480")
    assert token_for(source) == run_token()
    assert token_for(follower, "rig2") == follower_token(run_token(), "rig2") != run_token()
    spec = ServeSpec("o/m", "main", "/srv/m", "10.0.0.1", 28480, "/opt/h.pyz", 3600, followers=("rig2", "rig3"))
    words = shlex.split(spec.start_command().rsplit("; ", 1)[1])
    assert words[words.index("--followers") + 1] == "rig2,rig3"
    assert words[words.index("--idle-exit-s") + 1] == str(PEER_IDLE_S)
