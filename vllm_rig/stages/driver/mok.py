"""Stage the enrollment of dkms's signing key on a Secure Boot host (secure_boot_mok_enrollment=deploy_stages).

What the owner would type: make the key pair where dkms looks for it (only when it is missing, as dkms
itself would), `mokutil --import <certificate>` with a one-time password, then reboot at the console and
confirm in MokManager. The last step needs a person at the console, so while the request is pending
the host stops with what to do; the next run finds the key enrolled and carries on. The password
reaches mokutil on stdin (typed twice, as its prompt asks), never on a command line.
"""

from __future__ import annotations

import posixpath
import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from vllm_rig.stages.preflight.facts import Host, HostState

SUBJECT = "/CN=DKMS module signing key"  # what dkms puts in the pair it makes itself


def mok_password_stdin(password: str | None) -> str:
    return f"{password}\n{password}\n" if password else ""


def needs_staging(box: Host | None) -> bool:
    """Secure Boot on and dkms's certificate neither enrolled nor pending (or enrolled without its key)."""
    if not box or box.get("secure_boot") is not True:
        return False
    mok = box["mok"]
    return mok["state"] in ("not_enrolled", "missing") or (mok["state"] == "enrolled" and not mok["key_present"])


@operation(is_idempotent=True)
def mok_enrollment_staged(install_root: str = "/"):
    """Stage the import when needs_staging(); enrollment_problem() then stops the host for the console."""
    box = host.get_fact(HostState, path=install_root)
    if box is None or not needs_staging(box):
        host.noop("nothing to stage")
        return
    mok = box["mok"]
    key, cert = mok["key"], mok["cert"]
    if not key or not cert:  # _mok_shell always names both; without them there is nothing to stage
        host.noop("dkms's signing key and certificate are not known")
        return
    if mok.get("state") == "missing" or not mok.get("key_present"):
        dirs = " ".join(shlex.quote(d) for d in sorted({posixpath.dirname(key), posixpath.dirname(cert)}))
        yield StringCommand(
            f"mkdir -p {dirs} && openssl req -new -x509 -nodes -days 36500 -subj {shlex.quote(SUBJECT)} "
            "-newkey rsa:2048 -addext extendedKeyUsage=codeSigning "
            f"-keyout {shlex.quote(key)} -outform DER -out {shlex.quote(cert)} "
            f"</dev/null >/dev/null 2>&1 && chmod 600 {shlex.quote(key)}"
        )
    yield StringCommand(f"mokutil --import {shlex.quote(cert)}")


def enrollment_problem(box: Host | None) -> str | None:
    """The line that stops the host while the enrollment waits for MokManager at the console."""
    if not box or box.get("secure_boot") is not True or box["mok"]["state"] != "pending":
        return None
    return (
        f"the enrollment of {box['mok']['cert']} is staged: reboot the box at its console, choose Enroll MOK in "
        "MokManager, then Continue, Yes and the secure_boot_mok_password, and run the deploy again"
    )
