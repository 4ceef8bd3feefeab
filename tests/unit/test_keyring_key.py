"""The keyring package is the root of trust for NVIDIA's repository and comes from the same URL: before it is
installed, every key in it must be the fingerprint the control machine holds (nvidia_repo_key_fingerprint).
Real gpg makes the keys, real dpkg-deb builds and opens the packages, the operation's own shell checks them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.fake_host import plan
from vllm_rig.stages.driver.keyring import key_check, keyring_deb

URL = "https://mirror.example/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and shutil.which("dpkg-deb")), reason="needs gpg, dpkg-deb")


def _key(home: Path, uid: str) -> tuple[str, bytes]:
    """(fingerprint, binary public key) of a new ed25519 key (fast to make)."""
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", uid, "ed25519", "sign", "never"], check=True, capture_output=True)
    listing = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True)
    fpr = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    exported = subprocess.run([*gpg, "--export", fpr], check=True, capture_output=True).stdout
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    return fpr, exported


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, bytes]]:
    d = tmp_path_factory.mktemp("gnupg")
    return {name: _key(d / name, f"{name} <{name}@example.invalid>") for name in ("nvidia", "mirror")}


def _deb(tmp_path: Path, keyrings: dict[str, bytes]) -> Path:
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\nMaintainer: t <t@example.invalid>\n"
        "Description: keyring\n"
    )
    for path, data in keyrings.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    deb = tmp_path / "cuda-keyring.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


def _check(deb: Path, fingerprint: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", key_check(str(deb), URL, fingerprint)], capture_output=True, text=True)


def test_the_pinned_key_passes(tmp_path: Path, keys) -> None:
    fpr, key = keys["nvidia"]
    deb = _deb(tmp_path, {"usr/share/keyrings/cuda-archive-keyring.gpg": key})
    run = _check(deb, fpr)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert deb.exists()  # apt installs it next


def test_another_key_is_refused_in_one_line_and_the_package_removed(tmp_path: Path, keys) -> None:
    fpr, _ = keys["nvidia"]
    other, key = keys["mirror"]
    deb = _deb(tmp_path, {"usr/share/keyrings/cuda-archive-keyring.gpg": key})
    run = _check(deb, fpr)
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert f"holds the key(s) {other}, not the repository's signing key {fpr}" in run.stderr
    assert "nvidia_repo_key_fingerprint" in run.stderr and URL in run.stderr
    assert not deb.exists()


def test_the_pinned_key_beside_another_is_refused(tmp_path: Path, keys) -> None:
    """A second keyring in apt's trusted directory would let the mirror's key sign too."""
    fpr, key = keys["nvidia"]
    other, extra = keys["mirror"]
    deb = _deb(
        tmp_path,
        {"usr/share/keyrings/cuda-archive-keyring.gpg": key, "etc/apt/trusted.gpg.d/extra.gpg": extra},
    )
    run = _check(deb, fpr)
    assert run.returncode == 1 and other in run.stderr and not deb.exists(), run.stderr


def test_a_package_without_a_key_is_refused(tmp_path: Path, keys) -> None:
    deb = _deb(tmp_path, {"etc/apt/sources.list.d/cuda.list": b"deb https://mirror.example/ /\n"})
    run = _check(deb, keys["nvidia"][0])
    assert run.returncode == 1 and "holds the key(s) none" in run.stderr


def test_a_package_dpkg_cannot_open_is_refused_in_its_words_not_as_a_key(tmp_path: Path, keys) -> None:
    deb = tmp_path / "cuda-keyring.deb"
    deb.write_bytes(b"<html>a captive portal</html>\n")
    run = _check(deb, keys["nvidia"][0])
    assert run.returncode == 1 and "holds the key(s)" not in run.stderr and "dpkg-deb" in run.stderr, run.stderr
    assert not deb.exists()


def test_a_failed_download_stops_the_chain_before_the_check_and_apt(tmp_path: Path) -> None:
    """The check is one step of the operation's command: a download that fails is curl's error, not a key's."""
    url = (tmp_path / "none" / "cuda-keyring_1.1-1_all.deb").as_uri()
    _, commands = plan({}, keyring_deb, url=url, fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC")
    run = subprocess.run(["bash", "-c", commands[0]], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "holds the key(s)" not in run.stderr, run.stderr
    assert "apt-get" not in run.stderr
