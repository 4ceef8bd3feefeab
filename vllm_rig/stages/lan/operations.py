"""The LAN stage's operations: each reads the host with one fact and does only what differs."""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import operation

from vllm_rig.stages.lan.facts import DEFAULT_SITE_MARK, ClientKeys, Digest, KeyMap, LanTls, lan_host, lan_keys


# Own operation: files.put would overwrite a default site someone else put there.
@operation()
def default_site_off(path: str):
    """Before nginx is installed: a comment-only sites-enabled/default, so Debian's postinst does not link its
    port-80 welcome page (it links only when nothing is there). A site someone else put there is left alone."""
    state = lan_host(path)["default_site"]
    if state == "ours":
        host.noop("the distribution's default site is off")
        return
    if state == "other":
        host.noop(f"{path} is not vllm-rig's: left as it is")
        return
    q = shlex.quote(path)
    yield f"mkdir -p $(dirname {q}) && printf '%s\\n' {shlex.quote(DEFAULT_SITE_MARK)} > {q}"


@operation()
def local_ca(package: str, directory: str, names: tuple[str, ...]):
    """The local CA and a server certificate naming the host, its addresses and `names` (host program lan_tls).
    Its warnings are said here, on every run until the owner re-makes the CA (docs/lan.md: Security model), so
    the one read of lan_tls (~0.3 s of openssl runs) serves both."""
    tls = host.get_fact(LanTls, package=package, directory=directory, names=names)
    for line in tls["warnings"]:
        logger.warning(f"[{host.name}] LAN: {line}")
    state = tls["state"]
    if state.startswith("ok"):
        host.noop(state)
        return
    args = " ".join(f"--name {shlex.quote(n)}" for n in names)
    yield f"python3 {shlex.quote(package)} lan_tls ensure --dir {shlex.quote(directory)} {args}"


@operation()
def key_map(package: str, keys_dir: str, env_file: str, map_file: str):
    """The nginx map that names each accepted key (the service's own and every client's), made on the host by
    lan_keys from the env file and the keys' files."""
    state = host.get_fact(KeyMap, package=package, keys_dir=keys_dir, env_file=env_file, map_file=map_file)
    if state == "same":
        host.noop(f"{map_file} holds the service's key and the client keys")
        return
    yield lan_keys(package, "map", "--dir", keys_dir, "--env-file", env_file, "--out", map_file)


@operation()
def client_keys_made(package: str, keys_dir: str, names: tuple[str, ...], said_if_revoked: tuple[str, ...] = ()):
    """A key on the box for each name of api_keys that has none and was not revoked there (bin/rig keys
    revoke); keys that are not in api_keys stay (bin/rig keys add made them). Each name of `said_if_revoked`
    revoked on the box is said on every run, from the same one read."""
    found = host.get_fact(ClientKeys, package=package, keys_dir=keys_dir)
    for name in said_if_revoked:
        if name in found["revoked"] and name not in found["keys"]:
            logger.warning(
                f"[{host.name}] LAN: api_keys names {name}, revoked on the box with bin/rig keys revoke: not made "
                f"again (take it out of api_keys, or bin/rig keys add {name} for a new key)"
            )
    missing = [n for n in names if n not in found["keys"] and n not in found["revoked"]]
    if not missing:
        host.noop(f"{len(names)} client key(s) of api_keys on the box" if names else "no client key in api_keys")
        return
    yield lan_keys(package, "ensure", "--dir", keys_dir, *missing)


# Own operation: systemd.service(reloaded=True) reloads without `nginx -t`, only on this run's changes, and does
# not check that nginx took the port.
@operation()
def nginx_loaded(paths: tuple[str, ...], stamp: str, port: int):
    """nginx runs with the files as they are on disk: checked (`nginx -t`), then reloaded, when they changed
    since the last reload it made (a stamp of their digest: a run that failed before the reload heals). A
    reload whose new socket cannot bind keeps the old configuration and still exits 0, so the port is checked
    afterwards: nginx must be the one listening on it."""
    found = host.get_fact(Digest, paths=paths, stamp=stamp, unit="nginx.service", port=port)
    if found["active"] and found["listening"] and found["digest"] and found["digest"] == found["stamp"]:
        host.noop("nginx runs with the files on disk")
        return
    files = " ".join(shlex.quote(p) for p in paths)
    s = shlex.quote(stamp)
    listening = f"ss -Htlnp 'sport = :{int(port)}' | grep -q '\"nginx\"'"
    script = (
        "set -e; nginx -t -q; systemctl reload-or-restart nginx.service; "
        f"for i in 1 2 3 4 5 6 7 8 9 10; do {listening} && break; sleep 0.5; done; "
        f'{listening} || {{ echo "lan: nginx does not listen on port {int(port)} (another program has it?): '
        'see /var/log/nginx/vllm-rig-lan.error.log" >&2; exit 1; }; '
        f'mkdir -p $(dirname {s}); cat {files} 2>/dev/null | sha256sum | cut -d" " -f1 > {s}'
    )
    yield f"sh -c {shlex.quote(script)}"


# Own operation: files.file(present=False) would leave nginx serving the removed site until a reload.
@operation()
def site_absent(path: str, stamp: str):
    """lan_serving: direct: no vllm-rig site in nginx (nginx itself, and other sites, stay)."""
    found = host.get_fact(Digest, paths=(path,), stamp=stamp, unit="nginx.service")
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of nothing: no file
    if found["digest"] in (None, empty):
        host.noop(f"no {path}")
        return
    q = shlex.quote(path)
    yield (
        f"rm -f {q} {shlex.quote(stamp)} && "
        "{ ! systemctl -q is-active nginx.service || { nginx -t -q && systemctl reload nginx.service; }; }"
    )
