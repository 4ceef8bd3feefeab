"""Which host of a run fetches the model from which (vllm_rig/stages/model/peers.py's plan_roles)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from vllm_rig.settings import Settings
from vllm_rig.stages.model.peers import PeerRole, plan_roles
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
