"""The host program lan_keys (vllm_rig/host/lan_keys.py) on a temporary directory: keys made root-only and
never printed, revoked names not made again by a deploy, counts per key from nginx's access log lines, and the
keys listing as status shows it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from vllm_rig.host import lan_keys
from vllm_rig.stages.keys.deploy import listing_lines
from vllm_rig.stages.status import report


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = lan_keys.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _key(d: Path, name: str) -> str:
    return (d / name).read_text().strip()


def test_ensure_makes_each_named_key_root_only_and_never_prints_it(tmp_path: Path, capsys) -> None:
    d = tmp_path / "keys"
    rc, out, _ = _run(capsys, "ensure", "--dir", str(d), "laptop", "chat-page")
    assert rc == 0
    keys = {name: _key(d, name) for name in ("laptop", "chat-page")}
    assert len(set(keys.values())) == 2 and all(lan_keys.TOKEN.match(k) and len(k) >= 43 for k in keys.values())
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert all(stat.S_IMODE((d / n).stat().st_mode) == 0o600 for n in keys)
    assert f"made chat-page: sudo cat {d}/chat-page" in out
    assert not any(k in out for k in keys.values())
    # Again: nothing changes (the same keys, nothing said).
    assert _run(capsys, "ensure", "--dir", str(d), "laptop", "chat-page")[:2] == (0, "")
    assert {name: _key(d, name) for name in keys} == keys


def test_a_revoked_name_is_not_made_again_until_added(tmp_path: Path, capsys) -> None:
    d = str(tmp_path / "keys")
    lan_keys.ensure(d, ["laptop", "agent"])
    agent = _key(Path(d), "agent")
    assert _run(capsys, "revoke", "--dir", d, "laptop")[:2] == (0, "revoked laptop\n")
    assert not (Path(d) / "laptop").exists() and "laptop" in lan_keys.revoked(d)
    said = lan_keys.ensure(d, ["laptop", "agent"])  # the deploy, api_keys still naming it
    assert not (Path(d) / "laptop").exists() and len(said) == 1 and "revoked on this box" in said[0]
    assert _key(Path(d), "agent") == agent  # the other key untouched
    rc, out, _ = _run(capsys, "add", "--dir", d, "laptop")
    assert rc == 0 and out.startswith("made laptop") and "laptop" not in lan_keys.revoked(d)
    first = _key(Path(d), "laptop")
    assert _run(capsys, "add", "--dir", d, "laptop")[1].startswith("kept laptop")  # add again keeps the key
    assert _key(Path(d), "laptop") == first


@pytest.mark.parametrize("argv", [["revoke", "nobody"], ["add", "server"], ["add", "../x"], ["add", "A"]])
def test_bad_names_and_unknown_keys_are_one_line(tmp_path: Path, capsys, argv: list[str]) -> None:
    rc, out, err = _run(capsys, argv[0], "--dir", str(tmp_path / "keys"), *argv[1:])
    assert rc == 1 and out == "" and err.count("\n") == 1 and err.startswith("keys: ")
    assert not (tmp_path / "x").exists()


def test_a_key_file_edited_into_something_else_is_left_out_of_the_map(tmp_path: Path) -> None:
    d = tmp_path / "keys"
    lan_keys.ensure(str(d), ["laptop", "agent"])
    (d / "agent").write_text("two words\n")
    text = lan_keys.render_map("srv", lan_keys.client_keys(str(d)))
    assert " laptop;" in text and " agent;" not in text and "two" not in text


LOG = [
    # The format of templates/lan/nginx-site.conf.j2 (log_format vllm_rig_keys), as nginx writes it.
    '10.0.0.5 key=laptop [06/Dec/2025:10:00:00 +0000] "GET /v1/models HTTP/1.1" 200 90 "-" "curl/7.88" 1765015200.100',
    '10.0.0.5 key=- [06/Dec/2025:10:00:01 +0000] "GET /v1/models HTTP/1.1" 401 25 "-" "key=laptop x" 1765015201.200',
    '10.0.0.6 key=agent [06/Dec/2025:10:00:02 +0000] "POST /v1/completions HTTP/1.1" 200 900 "-" "a" 1765015202.000',
    '10.0.0.6 key=laptop [06/Dec/2025:10:00:03 +0000] "GET /health HTTP/1.1" 200 0 "-" "b" 1765015203.000',
    '10.0.0.6 - - [06/Dec/2025:09:00:00 +0000] "GET / HTTP/1.1" 401 25 "-" "older combined format"',
]


def test_requests_are_counted_per_key_since_a_time_across_the_rotated_log(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    Path(f"{log}.1").write_text("\n".join(LOG[:2]) + "\n")  # rotated by logrotate
    log.write_text("\n".join(LOG[2:]) + "\n")
    assert lan_keys.requests_since([f"{log}.1", str(log)], 0) == {"laptop": 2, "-": 1, "agent": 1}
    assert lan_keys.requests_since([f"{log}.1", str(log)], 1765015201.5) == {"agent": 1, "laptop": 1}
    d = tmp_path / "keys"
    lan_keys.ensure(str(d), ["laptop", "agent", "chat-page"])
    found = lan_keys.listing(str(d), str(log), 1765015201.5)
    assert {n: k["requests"] for n, k in found["keys"].items()} == {"agent": 1, "chat-page": 0, "laptop": 1}
    text = json.dumps(found) + "\n".join(listing_lines(found))
    assert not any(_key(d, n) in text for n in ("laptop", "agent", "chat-page"))
    # bin/rig status shows the same counts, from the probe's copy of this listing.
    raw = {"commands": {"keys": {"rc": 0, "out": json.dumps(found) + "\n"}}}
    [(title, counts)] = report.keys_section(raw).items()
    assert title == "requests since 2025-12-06T10:00:01+00:00"
    assert counts == "agent 1, chat-page 0, laptop 1, server 0, no key 0"


def test_a_revoked_api_key_name_is_said_by_the_read_that_makes_the_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.unit.fake_host import plan
    from vllm_rig.stages.lan.operations import client_keys_made

    state = json.dumps({"keys": ["phone"], "revoked": ["laptop", "chat-page"]})
    changes, commands = plan(
        {"lan_keys state": ["@@state", state]},
        client_keys_made,
        package="/opt/vllm-rig/bin/vllm-rig-host.pyz",
        keys_dir="/etc/vllm-rig/keys",
        names=("phone", "laptop", "tablet", "chat-page"),
        said_if_revoked=("phone", "laptop", "tablet"),
    )
    assert "api_keys names laptop, revoked on the box" in caplog.text
    assert "chat-page" not in caplog.text and "phone," not in caplog.text  # its stage says the page's own
    assert changes and len(commands) == 1 and "tablet" in commands[0] and "laptop" not in commands[0]
