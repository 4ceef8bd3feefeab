"""What the LAN stage reads on the host, each in one short command; none of them ever prints a key."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

# The first line of Debian's sites-enabled/default when vllm-rig put it there (the stock site stays off).
DEFAULT_SITE_MARK = "# vllm-rig: the distribution's default site (port 80) stays off on this box"


class LanHost(FactBase):
    """{"ipv6": the kernel has IPv6 addresses (nginx can listen on [::]), "default_site": absent | ours | other}."""

    def command(self, default_site: str) -> str:
        q = shlex.quote(default_site)
        mark = shlex.quote(DEFAULT_SITE_MARK)
        script = (
            # grep, not test -s: proc files show size 0
            "if grep -q . /proc/net/if_inet6 2>/dev/null; then echo ipv6=1; else echo ipv6=0; fi; "
            f"if [ ! -e {q} ] && [ ! -L {q} ]; then echo site=absent; "
            f'elif [ "$(head -n1 {q} 2>/dev/null)" = {mark} ]; then echo site=ours; else echo site=other; fi'
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {"ipv6": values.get("ipv6") == "1", "default_site": values.get("site", "absent")}


class LanTls(FactBase):
    """The local CA's state as lan_tls.py reports it: "ok: ...", "new: <why>" or "renew: <why>"."""

    def command(self, package: str, directory: str, names: tuple[str, ...]) -> str:
        args = " ".join(f"--name {shlex.quote(n)}" for n in names)
        p = shlex.quote(package)
        return (
            f"if [ -f {p} ]; then python3 {p} lan_tls check --dir {shlex.quote(directory)} {args}; "
            "else echo 'new: the host programs are not installed yet'; fi"
        )

    def process(self, output: list[str]) -> str:
        return next((line.strip() for line in output if line.strip()), "new: no answer")


class Digest(FactBase):
    """{"digest": sha256 over the files as they are now (a missing one counts as empty), "stamp": the stamp's
    text, "active": whether the unit runs, "listening": whether nginx listens on `port`}: enough to tell
    whether nginx loaded what is on disk."""

    def command(self, paths: tuple[str, ...], stamp: str, unit: str, port: int = 0) -> str:
        files = " ".join(shlex.quote(p) for p in paths)
        script = (
            f'printf "digest=%s\\n" "$(cat {files} 2>/dev/null | sha256sum | cut -d" " -f1)"; '
            f'printf "stamp=%s\\n" "$(cat {shlex.quote(stamp)} 2>/dev/null)"; '
            f'printf "active=%s\\n" "$(systemctl is-active {shlex.quote(unit)} 2>/dev/null)"; '
            f"ss -Htlnp 'sport = :{int(port)}' 2>/dev/null | grep -q '\"nginx\"' && echo listening=1 || true"
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "digest": values.get("digest") or None,
            "stamp": values.get("stamp") or None,
            "active": values.get("active") == "active",
            "listening": values.get("listening") == "1",
        }


# The nginx map that checks the key, written on the host from the service's env file: the key never leaves
# the host and never appears on a command line (the shell reads it from the file into a variable).
def key_map_script(env_file: str) -> str:
    """Shell that prints the map file's content for the key in env_file (nothing when there is no key)."""
    env = shlex.quote(env_file)
    # vLLM's AuthenticationMiddleware: scheme "bearer" in any case, one space, the key (server_utils.py).
    return (
        f'k=$(sed -n "s/^VLLM_API_KEY=//p" {env} 2>/dev/null | head -n1); [ -n "$k" ] || exit 0; '
        'printf "# vllm-rig: made on the host from the API key; root only. Do not edit.\\n'
        "map \\$http_authorization \\$vllm_rig_key_ok {\\n    default 0;\\n"
        '    \\"~^(?i:bearer) %s\\$\\" 1;\\n}\\n" "$k"'
    )


class KeyMap(FactBase):
    """ "same" when the map file holds the env file's key (mode 600), "differs", or "nokey"."""

    def command(self, env_file: str, map_file: str) -> str:
        m = shlex.quote(map_file)
        script = (
            f"want=$({key_map_script(env_file)}); "
            '[ -n "$want" ] || { echo nokey; exit 0; }; '
            f'if [ "$(stat -c %a {m} 2>/dev/null)" = 600 ] && printf "%s\\n" "$want" | cmp -s - {m}; '
            "then echo same; else echo differs; fi"
        )
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> str:
        return next((line.strip() for line in output if line.strip()), "differs")
