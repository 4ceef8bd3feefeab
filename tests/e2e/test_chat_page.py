"""The chat page (chat_page: true) on the sandbox: the real Open WebUI 0.12.4 and its real dependency closure
(served from tests/sandbox/fixtures/chat_index.py), the real CPU torch 2.13.0 of its torch lock, real nginx and
TLS, the stand-in server behind it; a real browser (Debian's headless Chromium) trusting the box's CA makes the
first account, sends a message and sees the server's answer. One deploy for the module, on top of the rig an
earlier module left serving on this slot (tests/e2e/deploys.py serving_rig)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Rig
from tests.e2e.deploys import deploy, serving_rig
from tests.sandbox import paths
from tests.sandbox.fixtures import chat_index
from vllm_rig import paths as rig_paths

pytestmark = pytest.mark.sandbox

PORT = paths.LAN_PORT_BASE + 20 + 1  # rig1's chat_page_port (inventory/sandbox.py)
CA = paths.REPO / "lan-ca" / "rig1-ca.crt"
OUT = paths.ROOT / "chat-page"  # the screenshot and the page's text, kept with the test's output
DATA = {"chat_page": True}
ADMIN = {"name": "Owner", "email": "owner@example.com", "password": "a-long-household-passphrase"}
VENV = "/opt/vllm-rig/chat-page/venv"
UNIT = "vllm-rig-chat-page.service"
FIRST: dict[str, object] = {}


@pytest.fixture(scope="module")
def page(rig: Rig) -> Iterator[Rig]:
    chat_index.build()  # ~0.55 GB from PyPI once (and the CPU torch from pip's find-links), then offline
    serving_rig(rig)  # the page adds to a serving box: an earlier module's whole deploy, kept, will do
    started = time.monotonic()
    run = deploy(rig, "deploy.py", data=DATA, timeout=1800)
    FIRST.update(run=run, seconds=time.monotonic() - started)
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
    print(f"chat page: the deploy that added the page to a serving box took {FIRST['seconds']:.0f} s")
    assert _api("/health") == {"status": True}
    unit = page.ssh("rig1", "systemctl show -p User -p PrivateDevices -p ActiveState vllm-rig-chat-page.service")
    assert "User=open-webui" in unit and "PrivateDevices=yes" in unit and "ActiveState=active" in unit
    listening = page.ssh("rig1", "ss -Htln").split()
    assert not any(a.endswith(f":{paths.LAN_PORT_BASE + 41}") and not a.startswith("127.") for a in listening)
    # The real CPU torch of the torch lock; no CUDA torch and no nvidia-* wheel came in.
    torch = page.ssh("rig1", f"{VENV}/bin/python -c 'import torch; print(torch.__version__, torch.version.cuda)'")
    assert torch.split() == ["2.13.0+cpu", "None"], torch
    wheels = page.ssh("rig1", f"{VENV}/bin/pip list --format=freeze").lower().split()
    assert "open-webui==0.12.4" in wheels and not [w for w in wheels if w.startswith("nvidia")], wheels
    env = page.ssh("rig1", "sudo stat -c '%a %U' /etc/vllm-rig/chat-page.env").split()
    assert env == ["600", "root"]
    usage = page.ssh("rig1", "sudo du -sm /opt/vllm-rig/chat-page/venvs /var/lib/open-webui; "
                     "systemctl show -p MemoryCurrent vllm-rig-chat-page.service; "
                     "ps -o rss= -p $(systemctl show -p MainPID --value vllm-rig-chat-page.service)")  # fmt: skip
    print("chat page cost (MB on disk; unit memory, bytes; main process RSS, KiB):", usage.replace("\n", "; "))


def test_a_second_run_changes_nothing(page: Rig) -> None:
    run = deploy(page, "deploy.py", data=DATA)
    assert run.ok, run.log[-3000:]
    assert run.changed == [], run.changed


def test_a_browser_makes_the_first_account_and_gets_the_servers_answer(page: Rig, tmp_path: Path) -> None:
    if shutil.which("chromedriver") is None or shutil.which("certutil") is None:
        pytest.skip("needs chromium, chromium-driver and libnss3-tools (tests/sandbox/host-packages.txt)")
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
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
        wait = WebDriverWait(browser, 120, ignored_exceptions=[StaleElementReferenceException])
        _answering()  # a page the deploy restarted is a 502 from nginx until it is up
        logged = int(page.ssh("rig1", f"sudo cat {rig_paths.LAN_ACCESS_LOG} 2>/dev/null | wc -l").strip() or 0)
        browser.get(f"https://127.0.0.1:{PORT}/")
        # With no account yet, Open WebUI 0.12.4 opens on a splash whose button leads to the admin's form.
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "input[type=email]") or _buttons(b, "Get started"))
        for button in _buttons(browser, "Get started")[:1]:
            button.click()
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, "input[type=email]")))
        for field, value in (
            ("#name", ADMIN["name"]),
            ("#email", ADMIN["email"]),
            ("input[type=password]", ADMIN["password"]),
        ):
            browser.find_element(By.CSS_SELECTOR, field).send_keys(value)  # the admin's form (its 0.12.4 ids)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        # After a first sign-in the release notes cover the page: closed with their button when they come.
        notes = WebDriverWait(browser, 30, ignored_exceptions=[StaleElementReferenceException])
        try:
            notes.until(lambda b: _buttons(b, "Okay, Let's Go!"))[0].click()
            notes.until(lambda b: not _buttons(b, "Okay, Let's Go!"))
        except TimeoutException:
            pass
        wait.until(lambda b: _typed(b, "#chat-input", "Say hello to the household."))
        wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, "#send-message-button"))).click()
        answer = wait.until(_answer)  # the server's reply, once its reasoning ("Thinking...") is over
    finally:
        browser.save_screenshot(str(OUT / "chat.png"))
        (OUT / "page.txt").write_text(browser.find_element(By.TAG_NAME, "body").text)
        browser.quit()
    assert answer.strip(), "no answer shown"
    # The page is a client like any other: it reached the server through nginx with its own key, which the
    # access log names (never the key), not with the server's.
    since = page.ssh("rig1", f"sudo tail -n +{logged + 1} {rig_paths.LAN_ACCESS_LOG}").splitlines()
    asked = [line for line in since if '"POST /v1/chat/completions ' in line]
    assert asked and all(" key=chat-page " in line for line in asked), since[-10:]


def _buttons(browser: Any, text: str) -> list:
    """The page's buttons that show `text` (none while the page redraws them)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return [b for b in browser.find_elements(By.TAG_NAME, "button") if text in b.text]
    except StaleElementReferenceException:
        return []


def _answer(browser: Any) -> str:
    """The last reply's text without the reasoning's header line ("Thinking...", "Thought for ...")."""
    from selenium.webdriver.common.by import By

    boxes = browser.find_elements(By.CSS_SELECTOR, "#response-content-container")
    lines = boxes[-1].text.splitlines() if boxes else []
    return "\n".join(line for line in lines if line.strip() and not line.startswith(("Thinking", "Thought for")))


def _typed(browser: Any, css: str, text: str) -> bool:
    """`text` typed into the field at `css`, found again on each try (the chat page redraws it after sign-in)."""
    from selenium.webdriver.common.by import By

    field = browser.find_element(By.CSS_SELECTOR, css)
    field.click()
    field.send_keys(text)
    return True


def _answering(seconds: float = 180) -> None:
    end = time.monotonic() + seconds
    while True:
        try:
            if _api("/health") == {"status": True}:
                return
        except OSError:
            pass
        assert time.monotonic() < end, "the chat page does not answer /health"
        time.sleep(2)


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
    _answering()
    assert _token()
    with pytest.raises(urllib.error.HTTPError):
        _api("/api/v1/auths/signin", {"email": later["email"], "password": later["password"]})


def test_a_bad_setting_is_one_line_before_any_host(page: Rig) -> None:
    run = deploy(page, "deploy.py", data={**DATA, "chat_page_port": paths.LAN_PORT_BASE + 1})
    assert run.rc != 0 and run.changed == []
    lines = [line for line in run.log.splitlines() if "chat_page_port" in line]
    assert len(lines) == 1 and "must differ from lan_port" in lines[0], lines


def test_remove_keeps_the_accounts_unless_asked(page: Rig) -> None:
    """Last: bin/rig remove (tasks/remove.py) takes the page's units, site and venv and says what it left: the
    accounts and chats; --with-chat-data (remove_chat_data) takes those too."""
    run = deploy(page, "tasks/remove.py")
    assert run.ok, run.log[-3000:]
    gone = page.ssh("rig1", f"ls /etc/systemd/system /etc/nginx/conf.d {VENV} 2>&1; systemctl is-active {UNIT}",
                    check=False)  # fmt: skip
    assert "vllm-rig-chat" not in gone.replace("No such file", "") and "inactive" in gone, gone
    assert page.ssh("rig1", "sudo test -f /var/lib/open-webui/data/webui.db && echo kept").strip() == "kept"
    assert "bin/rig remove --with-chat-data" in run.log
    run = deploy(page, "tasks/remove.py", data={"remove_chat_data": True})
    assert run.ok, run.log[-3000:]
    left = page.ssh("rig1", "sudo ls /var/lib/open-webui 2>&1; id open-webui 2>&1", check=False)
    assert left.count("No such") + left.count("no such") == 2, left
