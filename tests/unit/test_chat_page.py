"""The chat page's unit and nginx site as rendered from settings (templates/chat_page/), and the site as this
machine's real nginx reads it beside the LAN site whose client check it uses (skipped without nginx)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.groupdata import profile_data
from tests.unit.test_lan import _pair
from vllm_rig import paths
from vllm_rig.core.files import rendered
from vllm_rig.core.systemd_quote import SAFE
from vllm_rig.host import lan_keys
from vllm_rig.stages.chat_page import layout as chat
from vllm_rig.stages.chat_page.deploy import site_context, unit_context
from vllm_rig.stages.chat_page.facts import ChatEnv
from vllm_rig.stages.chat_page.layout import ChatDirs
from vllm_rig.stages.chat_page.operations import env_script
from vllm_rig.stages.lan import deploy as lan
from vllm_rig.stages.lan.deploy import client_names
from vllm_rig.validation import SettingsError, load_settings

DATA = {
    "chat_page": True,
    "lan_port": 8443,
    "vllm_port": 8001,
    "chat_page_backend_port": 3999,
    "served_model_name": "qwen-local",
}


def _settings(**more: object):
    return load_settings({**profile_data(), **DATA, **more})


def _unit(**more: object) -> str:
    s = _settings(**more)
    return rendered("/x", "chat_page/chat-page.service.j2", **unit_context(s, ChatDirs.of(s))).content.decode()


def _site(ipv6: bool = False, **more: object) -> str:
    return rendered("/x", "chat_page/nginx-site.conf.j2", **site_context(_settings(**more), ipv6=ipv6)).content.decode()


def _environment(unit: str) -> dict[str, str]:
    lines = (line.removeprefix("Environment=") for line in unit.splitlines() if line.startswith("Environment="))
    return dict(line.split("=", 1) for line in lines)


def test_the_unit_runs_unprivileged_on_loopback_with_the_gpus_hidden() -> None:
    unit = _unit()
    assert f"User={chat.USER}\n" in unit and f"Group={chat.USER}\n" in unit
    assert "PrivateDevices=yes\n" in unit and "NoNewPrivileges=yes\n" in unit and "ProtectSystem=strict\n" in unit
    assert f"ReadWritePaths={chat.HOME}\n" in unit
    assert re.search(r"^ExecStart=\S+/chat-page/venv/bin/open-webui serve --host 127\.0\.0\.1 --port 3999$", unit, re.M)
    env = _environment(unit)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["OPENAI_API_BASE_URLS"] == "https://localhost:8443/v1"  # the server through nginx on loopback
    assert env["AIOHTTP_CLIENT_SESSION_SSL"] == paths.LAN_CA_CERT  # trusting the box's CA alone
    assert "\nAfter=network-online.target vllm.service nginx.service\n" in unit
    assert env["DEFAULT_MODELS"] == "qwen-local"
    assert env["ENABLE_PERSISTENT_CONFIG"] == "False"  # a rotated key reaches the page on its next start
    assert env["DATA_DIR"] == chat.DATA_DIR and env["OFFLINE_MODE"] == "True"
    assert env["RAG_EMBEDDING_ENGINE"] == "openai"  # no sentence-transformers model fetched at start


def test_the_unit_holds_no_key_and_no_value_that_needs_quoting() -> None:
    unit = _unit(served_model_name="org/model-1.5@v2+fp8")
    assert f"EnvironmentFile={chat.ENV_FILE}\n" in unit
    assert "OPENAI_API_KEYS" not in unit and "WEBUI_SECRET_KEY" not in unit
    env = _environment(unit)
    assert env["DEFAULT_MODELS"] == "org/model-1.5@v2+fp8"
    # Written unquoted: systemd must read each value back as it is (no space, quote, % or $ in any).
    assert [k for k, v in env.items() if v and not SAFE.fullmatch(v)] == []


def test_a_name_that_would_need_quoting_never_reaches_the_unit() -> None:
    with pytest.raises(SettingsError, match="served_model_name"):
        _settings(served_model_name="qwen $HOME")


def test_the_venv_key_follows_both_locks_and_the_python() -> None:
    assert ChatDirs.of(_settings(python_version="3.11")).key != ChatDirs.of(_settings(python_version="3.12")).key
    torch_lock = Path(paths.__file__).resolve().parents[1] / "files" / chat.TORCH_LOCK
    assert "torch==2.13.0+cpu" in torch_lock.read_text() and chat.lock_text(chat.TORCH_LOCK) == torch_lock.read_text()


def test_the_site_serves_the_page_on_its_port_with_the_lans_tls_and_client_check() -> None:
    site = _site(chat_page_port=8445)
    assert "listen 8445 ssl;" in site and "listen [::]" not in site
    assert "listen [::]:8445 ssl;" in _site(ipv6=True, chat_page_port=8445)
    assert f"ssl_certificate {paths.LAN_CERT};" in site and f"ssl_certificate_key {paths.LAN_KEY};" in site
    assert "if ($vllm_rig_client_ok = 0) {\n        return 403;" in site
    assert "proxy_pass http://127.0.0.1:3999;" in site
    assert "proxy_set_header Upgrade $http_upgrade;" in site  # its live updates are a WebSocket


@pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")
def test_nginx_reads_the_chat_site_beside_the_lan_site(tmp_path: Path) -> None:
    _pair(tmp_path)
    s = _settings(lan_port=18443, chat_page_port=18445)
    sites = [
        rendered("/x", lan.TEMPLATE, **lan.site_context(s, ipv6=False)).content.decode(),
        rendered("/x", "chat_page/nginx-site.conf.j2", **site_context(s, ipv6=False)).content.decode(),
    ]
    (tmp_path / "vllm.env").write_text("VLLM_API_KEY=k\n")
    made = ["map", "--dir", str(tmp_path / "keys"), "--env-file", str(tmp_path / "vllm.env")]
    assert lan_keys.main([*made, "--out", str(tmp_path / "api-key.conf")]) == 0
    for i, site in enumerate(sites):
        for real, here in (
            (paths.LAN_KEY_MAP, tmp_path / "api-key.conf"),
            (paths.LAN_CERT, tmp_path / "box.crt"),
            (paths.LAN_KEY, tmp_path / "box.key"),
            ("/var/log/nginx/", f"{tmp_path}/"),
        ):
            site = site.replace(real, str(here))
        (tmp_path / f"site{i}.conf").write_text(site)
    user = "user root;\n" if os.geteuid() == 0 else ""
    (tmp_path / "nginx.conf").write_text(
        f"{user}pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n  include {tmp_path}/site0.conf;\n  include {tmp_path}/site1.conf;\n}}\n"
    )
    check = subprocess.run(
        ["nginx", "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode()


# ---- the page's own key (chat-page): made beside api_keys, read into its env file on the box


def test_the_page_gets_a_key_of_its_own_beside_api_keys() -> None:
    assert client_names(_settings(api_keys=["laptop"])) == ("laptop", chat.KEY_NAME)
    assert client_names(_settings(api_keys=["chat-page", "agent"])) == ("chat-page", "agent")  # once
    assert client_names(_settings(chat_page=False, api_keys=["laptop"])) == ("laptop",)
    assert f"{paths.KEYS_DIR}/chat-page" == chat.KEY_FILE


def test_the_page_needs_the_boxs_own_ca(tmp_path: Path) -> None:
    cert, key = _pair(tmp_path)
    with pytest.raises(SettingsError, match=r"chat_page.*needs lan_tls: local_ca .*https://localhost:<lan_port>"):
        _settings(lan_tls="own", lan_tls_cert_file=str(cert), lan_tls_key_file=str(key))
    assert _settings(chat_page=False, lan_tls="own", lan_tls_cert_file=str(cert), lan_tls_key_file=str(key))


def _env_state(key_file: Path, env_file: Path) -> str:
    out = subprocess.run(["sh", "-c", ChatEnv().command(str(key_file), str(env_file))], capture_output=True, text=True)
    return ChatEnv().process(out.stdout.splitlines())


def _write_env(key_file: Path, env_file: Path) -> dict[str, str]:
    run = subprocess.run(["sh", "-c", env_script(str(key_file), str(env_file))], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "" and run.stderr == "", run  # the key is never printed
    assert env_file.stat().st_mode & 0o777 == 0o600
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines())


def test_the_env_file_holds_the_pages_key_and_keeps_its_secret(tmp_path: Path) -> None:
    key_file, env_file = tmp_path / "keys" / "chat-page", tmp_path / "etc" / "chat-page.env"
    key_file.parent.mkdir()
    assert lan_keys.ensure(str(key_file.parent), [chat.KEY_NAME])  # made as the box makes it
    key = key_file.read_text().strip()
    assert _env_state(key_file, env_file) == "differs"
    first = _write_env(key_file, env_file)
    assert first["OPENAI_API_KEYS"] == key and len(first["WEBUI_SECRET_KEY"]) >= 32
    assert _env_state(key_file, env_file) == "same"  # a second run changes nothing
    # Revoked (bin/rig keys revoke chat-page): the page is left with no key, and it is not made again.
    lan_keys.revoke(str(key_file.parent), chat.KEY_NAME)
    assert lan_keys.ensure(str(key_file.parent), [chat.KEY_NAME])[0].startswith("warn: ")
    assert _env_state(key_file, env_file) == "differs"
    gone = _write_env(key_file, env_file)
    assert gone == {"OPENAI_API_KEYS": "", "WEBUI_SECRET_KEY": first["WEBUI_SECRET_KEY"]}  # nobody signed out
    assert _env_state(key_file, env_file) == "same"
    # Added again: the new key reaches the page.
    lan_keys.make(str(key_file.parent), chat.KEY_NAME)
    assert _env_state(key_file, env_file) == "differs"
    assert _write_env(key_file, env_file)["OPENAI_API_KEYS"] == key_file.read_text().strip() != key


def test_a_key_file_edited_into_no_bearer_token_reaches_no_env_file(tmp_path: Path) -> None:
    key_file, env_file = tmp_path / "chat-page", tmp_path / "chat-page.env"
    key_file.write_text("abc\nWEBUI_SECRET_KEY=stolen $(id)\n")
    assert _write_env(key_file, env_file)["OPENAI_API_KEYS"] == "abc"  # the first line only
    key_file.write_text("a b$(id)\n")
    assert _write_env(key_file, env_file)["OPENAI_API_KEYS"] == ""
