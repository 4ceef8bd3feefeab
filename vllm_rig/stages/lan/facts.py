"""What the LAN stage reads on the host, each in one short command; none of them ever prints a key."""

from __future__ import annotations

import json
import shlex
from typing import TypedDict

from vllm_rig.core.facts import SectionFact, Sections, kept_once, section_command

# The first line of Debian's sites-enabled/default when vllm-rig put it there (the stock site stays off).
DEFAULT_SITE_MARK = "# vllm-rig: the distribution's default site (port 80) stays off on this box"


class LanHostState(TypedDict):
    ipv6: bool  # the kernel has IPv6 addresses: nginx can listen on [::]
    default_site: str  # absent | ours | other


class LanHost(SectionFact[LanHostState]):
    """Whether the host has IPv6 and whose sites-enabled/default is there."""

    DEFAULT: LanHostState = {"ipv6": False, "default_site": "other"}  # a failed host: touch nothing of nginx's

    def command(self, default_site: str) -> str:
        q = shlex.quote(default_site)
        mark = shlex.quote(DEFAULT_SITE_MARK)
        return section_command(
            {
                "ipv6": "grep -q . /proc/net/if_inet6 2>/dev/null && echo yes",  # not test -s: proc files are size 0
                "site": (
                    f"if [ ! -e {q} ] && [ ! -L {q} ]; then echo absent; "
                    f'elif [ "$(head -n1 {q} 2>/dev/null)" = {mark} ]; then echo ours; else echo other; fi'
                ),
            }
        )

    def parse(self, sections: Sections) -> LanHostState:
        site = sections.required("site")
        if site not in ("absent", "ours", "other"):
            sections.unreadable("site", site)
        return {"ipv6": sections.first("ipv6") == "yes", "default_site": site}


def lan_host(default_site: str) -> LanHostState:
    """LanHost, read once per run once the default site is settled (ours, or someone else's: the stage leaves
    both as they are); the planning and the default-site operation each ask."""
    return kept_once(LanHost, lambda found: found["default_site"] != "absent", default_site=default_site)


class LanTlsState(TypedDict):
    state: str  # "ok: ...", "new: <why>" or "renew: <why>"
    warnings: list[str]  # what lan_tls said on its "warn: " lines (a CA without name constraints, names it refuses)


class LanTls(SectionFact[LanTlsState]):
    """The local CA's state as the host program lan_tls reports it, and its warnings."""

    DEFAULT: LanTlsState = {"state": "new: not read", "warnings": []}

    def command(self, package: str, directory: str, names: tuple[str, ...]) -> str:
        args = " ".join(f"--name {shlex.quote(n)}" for n in names)
        p = shlex.quote(package)
        return section_command(
            {
                "state": (
                    f"if [ -f {p} ]; then python3 {p} lan_tls check --dir {shlex.quote(directory)} {args}; "
                    "else echo 'new: the host programs are not installed yet'; fi"
                )
            }
        )

    def parse(self, sections: Sections) -> LanTlsState:
        state = sections.required("state")
        if not state.startswith(("ok", "new:", "renew:")):
            sections.unreadable("state", state)
        warnings = [
            line.strip()[len("warn: ") :] for line in sections.lines("state") if line.strip().startswith("warn: ")
        ]
        return {"state": state, "warnings": warnings}


class DigestState(TypedDict):
    digest: str | None  # sha256 over the files as they are now (a missing one counts as empty)
    stamp: str | None  # the stamp's text
    active: bool  # the unit runs
    listening: bool  # nginx listens on the port


class Digest(SectionFact[DigestState]):
    """Enough to tell whether nginx loaded what is on disk, in one command."""

    DEFAULT: DigestState = {"digest": None, "stamp": None, "active": False, "listening": False}

    def command(self, paths: tuple[str, ...], stamp: str, unit: str, port: int = 0) -> str:
        files = " ".join(shlex.quote(p) for p in paths)
        return section_command(
            {
                "digest": f'cat {files} 2>/dev/null | sha256sum | cut -d" " -f1',
                "stamp": f"cat {shlex.quote(stamp)} 2>/dev/null",
                "active": f"systemctl is-active {shlex.quote(unit)} 2>/dev/null",
                "listening": f"ss -Htlnp 'sport = :{int(port)}' 2>/dev/null | grep -q '\"nginx\"' && echo yes",
            }
        )

    def parse(self, sections: Sections) -> DigestState:
        return {
            "digest": sections.first("digest"),
            "stamp": sections.first("stamp"),
            "active": sections.first("active") == "active",
            "listening": sections.first("listening") == "yes",
        }


# The nginx map that checks the keys, made on the host by the host program lan_keys from the service's env file
# and the client keys' files: no key leaves the host or appears on a command line.
def lan_keys(package: str, action: str, *args: str) -> str:
    """The shell command that runs the host program lan_keys (vllm_rig/host/lan_keys.py)."""
    return shlex.join(["python3", package, "lan_keys", action, *args])


class KeyMap(SectionFact[str]):
    """ "same" when the map file holds the server's and the clients' keys (mode 600), "differs", or "nokey"."""

    DEFAULT: str = "differs"

    def command(self, package: str, keys_dir: str, env_file: str, map_file: str) -> str:
        check = lan_keys(package, "map", "--dir", keys_dir, "--env-file", env_file, "--out", map_file, "--check")
        return section_command({"map": f"if [ -f {shlex.quote(package)} ]; then {check}; else echo differs; fi"})

    def parse(self, sections: Sections) -> str:
        state = sections.required("map")
        if state not in ("same", "differs", "nokey"):
            sections.unreadable("map", state)
        return state


class ClientKeysState(TypedDict):
    keys: list[str]  # names with a key on the box
    revoked: list[str]  # names revoked on the box (a deploy does not make them again)


class ClientKeys(SectionFact[ClientKeysState]):
    """The client keys' names on the box (never a key)."""

    DEFAULT: ClientKeysState = {"keys": [], "revoked": []}

    def command(self, package: str, keys_dir: str) -> str:
        state = lan_keys(package, "state", "--dir", keys_dir)
        return section_command({"state": f"if [ -f {shlex.quote(package)} ]; then {state}; fi"})

    def parse(self, sections: Sections) -> ClientKeysState:
        text = sections.first("state")
        if not text:
            return self.default()
        try:
            data = json.loads(text)
        except ValueError:
            sections.unreadable("state", text)
        return {"keys": list(data.get("keys") or []), "revoked": list(data.get("revoked") or [])}
