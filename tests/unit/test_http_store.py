"""open_store's choice between the directory and the HTTP store, the setting as an operation argument (no
password in it), and prune's order from a listing in nginx's autoindex_format json. The HTTP store against a
real server: tests/sandbox/test_artifact_store.py."""

from __future__ import annotations

from pathlib import Path

import requests

from vllm_rig.core.secrets import Secret
from vllm_rig.stages.runtime import http_store
from vllm_rig.stages.runtime.artifact_store import LocalStore, StoreSetting, open_store
from vllm_rig.stages.runtime.http_store import HttpStore


def test_a_url_opens_the_http_store_with_its_auth_and_ca() -> None:
    setting = StoreSetting("https://store.lan/vllm-rig/", Secret("rig:s3cret"), "lan-ca.pem")
    store = open_store(setting)
    assert isinstance(store, HttpStore)
    assert store.session.auth == ("rig", "s3cret")
    assert store.verify == str(Path(http_store.__file__).resolve().parents[3] / "lan-ca.pem")
    assert store.describe() == "https://store.lan/vllm-rig/"
    assert isinstance(open_store("runtime-artifacts"), LocalStore)


def test_the_setting_prints_without_its_password() -> None:
    setting = StoreSetting("https://store.lan/vllm-rig/", Secret("rig:s3cret"))
    assert "s3cret" not in str(setting) and "s3cret" not in repr(setting)


def test_without_auth_or_ca_requests_falls_back_to_netrc_and_system_cas() -> None:
    store = open_store("http://10.0.0.5:8080/artifacts/")
    assert isinstance(store, HttpStore)
    assert store.session.auth is None and store.verify is True


def test_prune_order_is_newest_manifest_first_and_ignores_other_files() -> None:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    listing = [  # as nginx 1.22's autoindex_format json writes entries
        {"name": f"{a}.json", "type": "file", "mtime": "Tue, 01 Dec 2026 15:41:48 GMT", "size": 900},
        {"name": f"{a}.tar.gz", "type": "file", "mtime": "Tue, 01 Dec 2026 15:41:47 GMT", "size": 10},
        {"name": f"{b}.json", "type": "file", "mtime": "Wed, 02 Dec 2026 09:00:00 GMT", "size": 900},
        {"name": f"{c}.json", "type": "file", "mtime": "Mon, 30 Nov 2026 09:00:00 GMT", "size": 900},
        {"name": "notes.json", "type": "file", "mtime": "Thu, 03 Dec 2026 09:00:00 GMT", "size": 2},
    ]
    assert list(http_store._by_age(listing)) == [b, a, c]


def test_a_refused_connection_reads_as_one_short_reason() -> None:
    err = requests.ConnectionError(
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /a/x.json (Caused by "
        "NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new "
        "connection: [Errno 111] Connection refused'))"
    )
    assert http_store._reason(err) == "cannot connect (Connection refused)"
