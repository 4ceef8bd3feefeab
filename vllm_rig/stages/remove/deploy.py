"""Remove (on demand): what the deploy installed, in the order that keeps nothing half-running.

    pyinfra inventory.py tasks/remove.py                            (or bin/rig remove)
    pyinfra inventory.py tasks/remove.py --data remove_model=true   (also the model directories)
    pyinfra inventory.py tasks/remove.py --data remove_driver=true  (also the NVIDIA driver and CUDA)

1. the service, the watchdog timer, the GPU guard and every other vllm-rig unit (transient build, download
   and peer units included): stopped, disabled, their files gone; 2. with remove_driver, and only for a
   driver vllm-rig installed (its record, read before step 5 removes it), the NVIDIA and CUDA packages,
   unheld and purged, and vllm-rig's apt, modprobe and profile files (a reboot unloads the module); 3. the
   LAN proxy's nginx site (nginx and other sites stay); 4. the service's system user; 5. install_root
   (runtimes, tools, caches, scripts), the state and config directories (API key, TLS files, stamps, logs)
   and the service's home (its JIT caches), the model directories kept unless remove_model. Each step reads
   what is there first: a second run changes nothing.
"""

from __future__ import annotations

import posixpath
import shlex

from pyinfra import host, logger, state
from pyinfra.api import deploy, operation
from pyinfra.facts.server import Users

from vllm_rig import paths
from vllm_rig.core import end_of_run
from vllm_rig.core.facts import SectionFact, Sections, section_command
from vllm_rig.host.model_fetch import CACHE as MODEL_CACHE
from vllm_rig.paths import Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.chat_page import layout as chat
from vllm_rig.stages.cuda.deploy import PROFILE_FILE
from vllm_rig.stages.driver.apt_pin import ARCHIVE_PIN_FILE
from vllm_rig.stages.driver.deploy import LOCK_WAIT_FILE, NOUVEAU_FILE, PERSISTENCED_DROPIN, UNATTENDED_FILE
from vllm_rig.stages.front.deploy import LOADED_STAMP as FRONT_STAMP
from vllm_rig.stages.lan.deploy import LOADED_STAMP
from vllm_rig.stages.lan.operations import site_absent

UNIT_DIR = "/etc/systemd/system"
DRIVER_FILES = (LOCK_WAIT_FILE, UNATTENDED_FILE, NOUVEAU_FILE, ARCHIVE_PIN_FILE, PERSISTENCED_DROPIN, PROFILE_FILE)
# What the driver and CUDA stages install, by package name (the driver, its libraries, DKMS modules, CUDA).
DRIVER_PACKAGES = ("nvidia-*", "libnvidia-*", "xserver-xorg-video-nvidia-*", "cuda-*", "libcu*", "libnpp*",
                   "libnvjpeg*", "nsight-*")  # fmt: skip


def _glob(pattern: str) -> str:
    """A unit pattern for the shell: its name quoted, a trailing * left to expand."""
    stem = pattern.removesuffix("*")
    return shlex.quote(stem) + ("*" if stem != pattern else "")


class Units(SectionFact[dict[str, list[str]]]):
    """vllm-rig's units: those systemd has loaded or running ("loaded"), and their files ("files")."""

    DEFAULT: dict[str, list[str]] = {"loaded": [], "files": []}

    def command(self, patterns: tuple[str, ...]) -> str:
        q = " ".join(shlex.quote(p) for p in patterns)
        return section_command(
            {
                "loaded": f"systemctl list-units --all --plain --no-legend {q} "
                '| awk \'$2 == "loaded" || $3 != "inactive" {print $1}\'',
                "files": f"cd {UNIT_DIR} && ls -1d {' '.join(_glob(p) for p in patterns)} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> dict[str, list[str]]:
        return {k: sections.words(k) for k in ("loaded", "files")}


# Own operation: which units there are is found on the box by pattern; systemd.service needs their names first.
@operation()
def units_removed(patterns: tuple[str, ...]):
    """Every unit matching `patterns` stopped, disabled and its file (and drop-ins) removed."""
    found = host.get_fact(Units, patterns=patterns)
    if not found["loaded"] and not found["files"]:
        host.noop("no vllm-rig units")
        return
    loaded = " ".join(shlex.quote(u) for u in found["loaded"])
    files = " ".join(shlex.quote(posixpath.join(UNIT_DIR, f)) for f in found["files"])
    if found["files"]:
        names = " ".join(shlex.quote(f) for f in found["files"] if not f.endswith(".d"))
        yield f"systemctl disable --now {names} 2>/dev/null || true"
    if loaded:
        yield f"systemctl stop {loaded} 2>/dev/null || true"
    if files:
        yield f"rm -rf {files}"
    yield "systemctl daemon-reload"
    if loaded:
        yield f"systemctl reset-failed {loaded} 2>/dev/null || true"


class Present(SectionFact[dict[str, list[str]]]):
    """Which of `candidates` exist ("present"), and the entries of each directory in `listed` ("<dir>")."""

    DEFAULT: dict[str, list[str]] = {"present": []}

    def command(self, candidates: tuple[str, ...], listed: tuple[str, ...]) -> str:
        checks = "; ".join(f"[ -e {shlex.quote(p)} ] && echo {shlex.quote(p)}" for p in candidates)
        sections = {"present": checks or "true"}
        for i, d in enumerate(listed):
            sections[f"dir{i}"] = f"ls -1A {shlex.quote(d)} 2>/dev/null"
        return section_command(sections)

    def parse(self, sections: Sections) -> dict[str, list[str]]:
        return {name: sections.words(name) for name in sections.raw}  # "present", "dir0", "dir1"...


def _within(path: str, top: str) -> bool:
    return path.startswith(top.rstrip("/") + "/")


def _ancestors(keep: str, top: str) -> list[str]:
    """The directories from `top` down to `keep`'s parent (`keep` inside `top`)."""
    chain, d = [], posixpath.dirname(keep)
    while d != top and _within(d, top):
        chain.append(d)
        d = posixpath.dirname(d)
    return [top, *reversed(chain)]


def removal(candidates: tuple[str, ...], keep: tuple[str, ...], found: dict[str, list[str]]) -> list[str]:
    """The paths to delete: each candidate that exists, except that one holding a kept path is not deleted
    whole; its entries are, down the way to the kept path, the way itself kept. `found` is Present's answer
    for `candidates` and `listing_dirs(candidates, keep)`."""
    listed = listing_dirs(candidates, keep)
    entries = {d: found.get(f"dir{i}", []) for i, d in enumerate(listed)}
    kept_ways = {a for k in keep for c in candidates if _within(k, c) for a in _ancestors(k, c)[1:]}
    out: list[str] = []
    for c in candidates:
        if c not in found["present"] or any(c == k or _within(c, k) for k in keep):
            continue
        inner = [k for k in keep if _within(k, c)]
        if not inner:
            out.append(c)
            continue
        for d in (d for d in listed if d == c or _within(d, c)):
            out += [
                posixpath.join(d, e)
                for e in entries[d]
                if posixpath.join(d, e) not in kept_ways and not any(in_family(posixpath.join(d, e), k) for k in keep)
            ]
    return out


def in_family(path: str, kept: str) -> bool:
    """`path` is `kept` or one of the files beside it that belong to it: a model_dir is a symlink to its
    snapshot in huggingface_hub's cache beside it (hf-cache, shared by the model dirs there), beside the fetch's
    .DIR.* files, DIR.replaced-* and the layout before the cache (DIR.rev-*, DIR.partial-*)."""
    if posixpath.dirname(path) != posixpath.dirname(kept):
        return False
    name, base = posixpath.basename(path), posixpath.basename(kept)
    return name in (base, MODEL_CACHE) or name.startswith((f"{base}.", f".{base}."))


def listing_dirs(candidates: tuple[str, ...], keep: tuple[str, ...]) -> tuple[str, ...]:
    """The directories whose entries `removal` needs: those on the way from a candidate to a kept path."""
    dirs: list[str] = []
    for c in candidates:
        for k in keep:
            if _within(k, c):
                dirs += [d for d in _ancestors(k, c) if d not in dirs]
    return tuple(dirs)


# Own operation: files.file/files.directory(present=False) take one path each, with a read each; this reads all.
@operation()
def paths_removed(candidates: tuple[str, ...], keep: tuple[str, ...] = ()):
    """Each candidate deleted, except the kept paths (and the directories on their way)."""
    found = host.get_fact(Present, candidates=candidates, listed=listing_dirs(candidates, keep))
    gone = removal(candidates, keep, found)
    if not gone:
        host.noop("nothing left to remove")
        return
    yield "rm -rf -- " + " ".join(shlex.quote(p) for p in gone)


@operation()
def model_files_removed(model_dirs: tuple[str, ...]):
    """Each model directory and its family beside it (in_family: the snapshots it points to, staging)."""
    parents = tuple(dict.fromkeys(posixpath.dirname(d) for d in model_dirs))
    found = host.get_fact(Present, candidates=(), listed=parents)
    gone = [
        posixpath.join(p, e)
        for i, p in enumerate(parents)
        for e in found.get(f"dir{i}", [])
        if any(in_family(posixpath.join(p, e), d) for d in model_dirs)
    ]
    if not gone:
        host.noop("no model directories")
        return
    yield "rm -rf -- " + " ".join(shlex.quote(p) for p in gone)


# Own operation: server.user(present=False) would remove a login user of the same name too.
@operation()
def system_user_removed(user: str):
    """The service's system user gone (a login user of the same name, uid 1000 and up, is never touched)."""
    uid = host.get_fact(Users).get(user, {}).get("uid")  # reads every account: once, in a removal
    if uid is None:
        host.noop(f"no user {user}")
        return
    if uid >= 1000:
        _say(f"{user} is a login user (uid {uid}), not the deploy's; left")
        host.noop(f"{user} is a login user")
        return
    yield f"userdel {shlex.quote(user)}"


class DriverPackages(SectionFact[dict[str, object]]):
    """vllm-rig's driver record, and the installed and the held packages of the driver and CUDA."""

    DEFAULT: dict[str, object] = {"record": None, "installed": [], "held": []}

    def command(self, patterns: tuple[str, ...]) -> str:
        q = " ".join(shlex.quote(p) for p in patterns)
        return section_command(
            {
                "record": f"cat {paths.DRIVER_RECORD} 2>/dev/null",
                "installed": f"dpkg-query -W -f='${{db:Status-Abbrev}} ${{Package}}\\n' {q} 2>/dev/null "
                "| awk '$1 ~ /^.i/ {print $2}'",
                "held": f"apt-mark showhold {q} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> dict[str, object]:
        names = {k: sorted(set(sections.words(k))) for k in ("installed", "held")}
        return {"record": sections.first("record"), **names}


@operation()
def driver_removed(patterns: tuple[str, ...], files: tuple[str, ...]):
    """The driver and CUDA packages unheld and purged, vllm-rig's apt, modprobe and profile files gone, the
    initramfs rebuilt. Only for a driver vllm-rig installed: without its record the driver is someone else's."""
    found = host.get_fact(DriverPackages, patterns=patterns)
    if not found["record"] and found["installed"]:
        _say(f"the NVIDIA driver was not installed by vllm-rig (no {paths.DRIVER_RECORD}); left as it is")
        host.noop("the driver is not vllm-rig's")
        return
    present = host.get_fact(Present, candidates=(*files, paths.DRIVER_RECORD), listed=())["present"]
    installed, held = list(found["installed"]), list(found["held"])  # type: ignore[call-overload]
    if not installed and not present:
        host.noop("no driver or CUDA of vllm-rig's")
        return
    if held:
        yield "apt-mark unhold " + " ".join(shlex.quote(p) for p in held)
    if installed:
        yield (
            "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "
            + " ".join(shlex.quote(p) for p in installed)
            + " && DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -q --purge"
        )
    if present:
        yield "rm -rf -- " + " ".join(shlex.quote(p) for p in present)
    yield "if command -v update-initramfs >/dev/null; then update-initramfs -u; fi"
    _say("the driver and CUDA are purged; the loaded module goes at the next reboot")


def _say(message: str) -> None:
    """A warning when the operation runs (its body also runs while pyinfra plans)."""
    if state.is_executing:
        logger.warning(f"[{host.name}] remove: {message}")


class LeftBehind(SectionFact[dict[str, list[str]]]):
    """What a remove leaves unless asked (read before it runs): the model directories' sizes, the held driver and
    CUDA packages with their installed size, the CUDA toolkits, NVIDIA's apt source, the nouveau blacklist, nginx
    and its stub default site, and the driver's record (whether the driver is vllm-rig's)."""

    DEFAULT: dict[str, list[str]] = {}

    def command(self, model_dirs: tuple[str, ...]) -> str:
        dirs = " ".join(shlex.quote(d) for d in model_dirs)
        driver = " ".join(shlex.quote(p) for p in DRIVER_PACKAGES)
        return section_command(
            {
                "model": f"du -sb {dirs} 2>/dev/null",
                "held": f"apt-mark showhold {driver} 2>/dev/null",
                "driver_kib": f"dpkg-query -W -f='${{Installed-Size}}\n' {driver} 2>/dev/null",
                "cuda": "du -sb /usr/local/cuda-*/ 2>/dev/null",
                "apt_source": "ls -d /etc/apt/sources.list.d/*cuda* /etc/apt/sources.list.d/*nvidia* 2>/dev/null",
                "nouveau": f"ls {NOUVEAU_FILE} 2>/dev/null",
                "nginx": "dpkg-query -W -f='${db:Status-Abbrev} ${Installed-Size}\n' nginx 2>/dev/null",
                "nginx_stub": f"head -n1 {paths.NGINX_DEFAULT_SITE} 2>/dev/null",
                "chat_data": f"du -sb {chat.HOME} 2>/dev/null",
                "record": f"cat {paths.DRIVER_RECORD} 2>/dev/null",
            }
        )

    def parse(self, sections: Sections) -> dict[str, list[str]]:
        return {k: sections.words(k) for k in sections.raw}


def _size(n_bytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def _du(lines: list[str]) -> list[tuple[str, int]]:
    """`du -sb` lines: (path, bytes)."""
    out = []
    for line in lines:
        size, _, path = line.partition("\t")
        if size.strip().isdigit():
            out.append((path.strip().rstrip("/"), int(size)))
    return out


def left_lines(found: dict[str, list[str]], s: Settings) -> list[str]:
    """What this remove leaves on the box, each with its size where it has one and how to remove it."""
    left: list[str] = []
    if not s.remove_model:
        for path, size in _du(found.get("model", [])):
            left.append(f"the model at {path} ({_size(size)}): bin/rig remove --with-model")
    driver_goes = s.remove_driver and bool(found.get("record"))
    theirs = "" if found.get("record") else " (not installed by vllm-rig: yours to keep or remove)"
    how_driver = "bin/rig remove --with-driver" if found.get("record") else "sudo apt-get purge on the box"
    if not driver_goes:
        held = found.get("held", [])
        kib = sum(int(k) for k in found.get("driver_kib", []) if k.isdigit())
        if held:
            shown = f", {_size(kib * 1024)} installed" if kib else ""
            left.append(f"the NVIDIA driver and CUDA packages, {len(held)} held{shown}{theirs}: {how_driver}")
        for path, size in _du(found.get("cuda", [])):
            left.append(f"CUDA {path} ({_size(size)}){theirs}: {how_driver}")
        for path in found.get("apt_source", []):
            left.append(f"NVIDIA's apt source {path}: {how_driver}")
        if found.get("nouveau"):
            left.append(f"the nouveau blacklist {NOUVEAU_FILE} (the open-source driver stays off): {how_driver}")
    nginx = (found.get("nginx") or [""])[0].split()
    if nginx and nginx[0].endswith("i"):
        shown = f" ({_size(int(nginx[1]) * 1024)})" if len(nginx) > 1 and nginx[1].isdigit() else ""
        ours = any("vllm-rig" in line for line in found.get("nginx_stub", []))
        stub = " with a stub default site (port 80 off)" if ours else ""
        left.append(f"nginx{shown}{stub}: sudo apt-get purge nginx nginx-common on the box")
    for path, size in _du(found.get("chat_data", [])) if not s.remove_chat_data else []:
        left.append(
            f"the chat page's accounts, chats and copies at {path} ({_size(size)}): bin/rig remove --with-chat-data"
        )
    return left


def model_dirs(s: Settings) -> tuple[str, ...]:
    """The model directories: the model setting's and every catalogue entry's."""
    dirs = [s.model_dir, *(str(e.get("dir")) for e in s.models.values() if isinstance(e, dict) and e.get("dir"))]
    return tuple(dict.fromkeys(dirs))


@deploy("Remove")
def remove_rig(s: Settings) -> None:
    layout = Layout.of(s)
    models = model_dirs(s)
    # Read before anything goes, said last (after pyinfra's results table, core/end_of_run.py).
    left = left_lines(host.get_fact(LeftBehind, model_dirs=models), s)
    for line in left or ["nothing of the rig's"]:
        end_of_run.say(f"[{host.name}] left on the box: {line}")
    units_removed(
        name="vllm-rig's units stopped, disabled and removed (service, watchdog, GPU guard, build, download)",
        patterns=(f"{s.service_name}.service", "vllm-rig-*"),
    )
    # Before the state directory goes: the driver's record in it says the driver is vllm-rig's to remove.
    if s.remove_driver:
        driver_removed(
            name="The NVIDIA driver and CUDA purged, vllm-rig's apt and modprobe files removed",
            patterns=DRIVER_PACKAGES,
            files=DRIVER_FILES,
        )
    # The front first: it uses the LAN site's key map and client networks, so nginx -t fails without them.
    site_absent(name="No front in nginx (front_of)", path=paths.FRONT_SITE, stamp=FRONT_STAMP)
    # The chat site uses the LAN site's client check ($vllm_rig_client_ok): it goes first, or nginx -t fails.
    site_absent(name="No chat page site in nginx", path=chat.NGINX_SITE, stamp=chat.LOADED_STAMP)
    site_absent(name="No vllm-rig site in nginx", path=paths.NGINX_SITE, stamp=LOADED_STAMP)
    system_user_removed(name=f"The service's system user {s.service_user} removed", user=s.service_user)
    if s.remove_chat_data:  # the page's accounts and chats: kept unless asked (with their owner, open-webui)
        system_user_removed(name=f"The chat page's system user {chat.USER} removed", user=chat.USER)
        paths_removed(name="The chat page's accounts, chats and copies removed", candidates=(chat.HOME,))
    paths_removed(
        name="Runtimes, tools, caches, state, the API key and TLS files removed"
        + ("" if s.remove_model else " (the model directories kept)"),
        candidates=(s.install_root, paths.STATE_DIR, paths.ETC_DIR, layout.service_home),
        keep=() if s.remove_model else models,
    )
    if s.remove_model:
        model_files_removed(name="The model directories removed, with their snapshots", model_dirs=models)
