"""The chat page (chat_page: true) on the sandbox: the real Open WebUI 0.12.4 and its real dependency closure
(served from tests/sandbox/fixtures/chat_index.py), the stand-in torch for its CPU torch, real nginx and TLS,
the stand-in server behind it; a real browser (Debian's headless Chromium) trusting the box's CA makes the
first account, sends a message and sees the server's answer. One deploy for the module."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import DeployRun, deploy, fresh
from tests.sandbox import paths
from tests.sandbox.fixtures import chat_index

pytestmark = pytest.mark.sandbox

PORT = paths.LAN_PORT_BASE + 20 + 1  # rig1's chat_page_port (inventory/sandbox.py)
CA = paths.REPO / "lan-ca" / "rig1-ca.crt"
OUT = paths.ROOT / "chat-page"  # the screenshot and the page's text, kept with the test's output
DATA = {"chat_page": True}
ADMIN = {"name": "Owner", "email": "owner@example.com", "password": "a-long-household-passphrase"}
FIRST: dict[str, DeployRun] = {}


@pytest.fixture(scope="module")
def page(rig: Rig) -> Iterator[Rig]:
    chat_index.build()  # ~0.6 GB from PyPI once, then offline
    fresh(rig)
    started = time.monotonic()
    run = deploy(rig, "deploy.py", data=DATA, timeout=1800)
    FIRST["run"], FIRST["seconds"] = run, time.monotonic() - started  # type: ignore[assignment]
    assert run.ok, run.log[-4000:]
    yield rig


def _api(path: str, body: dict | None = None, token: str | None = None) -> dict:
    """One request to the page through nginx, TLS checked against the box's CA."""
    req = urllib.request.Request(f"https://127.0.0.1:{PORT}{path}", method="POST" if body else "GET")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    data = json.dumps(body).encode() if body else None
    with urllib.request.urlopen(req, data=data, timeout=60, context=ssl.create_default_context(cafile=CA)) as resp:
        return json.loads(resp.read() or b"{}")


def test_the_page_answers_over_tls_with_the_gpus_hidden(page: Rig) -> None:
    print(f"chat page: first deploy with the page took {FIRST['seconds']:.0f} s")  # type: ignore[str-format]
    assert _api("/health") == {"status": True}
    unit = page.ssh("rig1", "systemctl show -p User -p PrivateDevices -p ActiveState vllm-rig-chat-page.service")
    assert "User=open-webui" in unit and "PrivateDevices=yes" in unit and "ActiveState=active" in unit
    listening = page.ssh("rig1", "ss -Htln").split()
    assert not any(a.endswith(f":{paths.LAN_PORT_BASE + 41}") and not a.startswith("127.") for a in listening)
    # No CUDA torch and no nvidia-* wheel came from the lock (the stand-in torch's own deps aside).
    venv = page.ssh("rig1", "ls /opt/vllm-rig/chat-page/venv/lib/python3.11/site-packages")
    assert "open_webui-0.12.4.dist-info" in venv
    env = page.ssh("rig1", "sudo stat -c '%a %U' /etc/vllm-rig/chat-page.env").split()
    assert env == ["600", "root"]
    usage = page.ssh("rig1", "sudo du -sm /opt/vllm-rig/chat-page /var/lib/open-webui; "
                     "systemctl show -p MemoryCurrent vllm-rig-chat-page.service")  # fmt: skip
    print("chat page cost:", usage.replace("\n", "; "))


def test_a_second_run_changes_nothing(page: Rig) -> None:
    run = deploy(page, "deploy.py", data=DATA)
    assert run.ok, run.log[-3000:]
    assert run.changed == [], run.changed


def test_a_browser_makes_the_first_account_and_gets_the_servers_answer(page: Rig, tmp_path: Path) -> None:
    if shutil.which("chromedriver") is None or shutil.which("certutil") is None:
        pytest.skip("needs chromium, chromium-driver and libnss3-tools (tests/sandbox/host-packages.txt)")
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    home = tmp_path / "home"  # Chromium trusts the box's CA through its own NSS database, nothing else
    (home / ".pki" / "nssdb").mkdir(parents=True)
    db = f"sql:{home}/.pki/nssdb"
    subprocess.run(["certutil", "-N", "-d", db, "--empty-password"], check=True)
    subprocess.run(["certutil", "-A", "-d", db, "-t", "C,,", "-n", "rig1 LAN CA", "-i", str(CA)], check=True)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"), env={"HOME": str(home)})
    browser = webdriver.Chrome(options=options, service=service)
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        wait = WebDriverWait(browser, 120)
        browser.get(f"https://127.0.0.1:{PORT}/")
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, "input[type=email]")))
        for name, value in (("name", ADMIN["name"]), ("email", ADMIN["email"]), ("password", ADMIN["password"])):
            fields = browser.find_elements(By.CSS_SELECTOR, f"input[name={name}], input[type={name}]")
            if fields:
                fields[0].send_keys(value)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        box = wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, "#chat-input")))
        box.click()
        box.send_keys("Say hello to the household.")
        wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, "#send-message-button"))).click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#response-content-container")) > 0
                   and b.find_elements(By.CSS_SELECTOR, "#response-content-container")[-1].text.strip())  # fmt: skip
        answer = browser.find_elements(By.CSS_SELECTOR, "#response-content-container")[-1].text
    finally:
        browser.save_screenshot(str(OUT / "chat.png"))
        (OUT / "page.txt").write_text(browser.find_element(By.TAG_NAME, "body").text)
        browser.quit()
    assert answer.strip(), "no answer shown"


def _token() -> str:
    return _api("/api/v1/auths/signin", {"email": ADMIN["email"], "password": ADMIN["password"]})["token"]


def test_backup_and_restore_bring_the_accounts_back(page: Rig) -> None:
    token = _token()  # the browser test's account, or made here when the browser was skipped
    page.ssh("rig1", "sudo systemctl start vllm-rig-chat-backup.service")
    copies = page.ssh("rig1", "sudo python3 /opt/vllm-rig/chat-page/vllm-rig-chat-backup list").split()
    assert copies, "no copy made"
    later = {"name": "Later", "email": "later@example.com", "password": "another-long-passphrase"}
    _api("/api/v1/auths/add", {**later, "role": "user"}, token=token)
    page.ssh("rig1", f"sudo python3 /opt/vllm-rig/chat-page/vllm-rig-chat-backup restore {copies[-1]}", timeout=120)
    for _ in range(90):
        try:
            if _api("/health") == {"status": True}:
                break
        except OSError:
            time.sleep(2)
    assert _token()
    with pytest.raises(urllib.error.HTTPError):
        _api("/api/v1/auths/signin", {"email": later["email"], "password": later["password"]})


def test_a_bad_setting_is_one_line_before_any_host(page: Rig) -> None:
    run = deploy(page, "deploy.py", data={**DATA, "chat_page_port": paths.LAN_PORT_BASE + 1})
    assert run.rc != 0 and run.changed == []
    lines = [line for line in run.log.splitlines() if "chat_page_port" in line]
    assert len(lines) == 1 and "must differ from lan_port" in lines[0], lines
