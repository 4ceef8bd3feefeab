"""Which host of the run fetches the model from which (decided while the run is planned, the same for all).

Hosts of one run with model_peers on and the same model_repo@model_revision form a group. Its source is the
first host in inventory order that already holds the model verified (its `model_fetch.py check` passes), else
the first host in inventory order (it fetches from hf_endpoint as always). Every other host of the group that
does not hold the model fetches it from the source: its model_fetch.py asks the source's model_serve.py, which
answers "not yet" while the source's own download runs, and the follower waits up to model_peer_wait_s. The
source serves only while some host fetches from it; a group where every host holds the model does nothing.

The per-run token is made here, once per run on the control machine. The source's 0600 token file holds it;
each follower's holds that follower's own token, derived from it (model_serve.follower_token), which the source
refuses once that follower said it is done. The source's server stops by itself when every follower said so,
or when none asked for PEER_IDLE_S, or at RuntimeMaxSec, and the run's last model operation stops it: a run
that is interrupted leaves a server for minutes at most, not hours, and a token that nothing accepts.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace

from pyinfra import host, state
from pyinfra.api.host import Host

from vllm_rig import host_settings
from vllm_rig.core import become
from vllm_rig.core.secrets import Secret
from vllm_rig.host.model_peer import TOKEN_ENV
from vllm_rig.host.model_serve import follower_token
from vllm_rig.paths import MODEL_PEER_TOKEN_FILE, MODEL_SERVE_UNIT, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.model.facts import ModelFetch
from vllm_rig.stages.model.operations import FetchSpec, ServeSpec, model_peering_ended, model_served, secret_env_file

SERVE_GRACE_S = 300  # the server outlives the longest download by this much at most (RuntimeMaxSec)
PEER_IDLE_S = 120  # the server stops when no follower asked for this long (a follower polls every 2 s)


@dataclass(frozen=True)
class PeerRole:
    """This host's part: serving the model to `serve_to`, or fetching it from `source` at `url`."""

    serve_to: tuple[str, ...] = ()
    source: str | None = None
    url: str | None = None

    @property
    def fetch_arg(self) -> str | None:
        """model_fetch.py's --peer: NAME=URL."""
        return f"{self.source}={self.url}" if self.source and self.url else None


_TOKEN = secrets.token_hex(24)
_roles: dict[str, PeerRole] | None = None


def run_token() -> str:
    return _TOKEN


def token_for(role: PeerRole, name: str | None = None) -> str:
    """What this host's token file holds: the run's token on a source (it derives each follower's), a
    follower's own token on a follower (`name`: the host, the current one by default)."""
    if role.serve_to:
        return run_token()
    return follower_token(run_token(), name or host.name)


def peer_role() -> PeerRole | None:
    """The current host's role in this run, or None when it neither serves nor fetches from a peer."""
    global _roles
    if _roles is None:
        _roles = plan_roles(_run_hosts(), lambda h: host_settings.of(h.name), holds_model)
    return _roles.get(host.name)


def _run_hosts() -> list[Host]:
    """The run's hosts in inventory order, less those whose preflight already failed."""
    return [h for h in state.inventory if h in state.activated_hosts and h not in state.failed_hosts]


def holds_model(other: Host, s: Settings) -> bool:
    become.decide(other)  # sudo or not for that host, before its first fact
    return other.get_fact(ModelFetch, **FetchSpec.of(s).fact_args())["check_rc"] == 0


def peer_address(other: Host, s: Settings) -> str:
    return str(s.model_peer_address or other.data.get("ssh_hostname") or other.name)


def peer_url(other: Host, s: Settings) -> str:
    address = peer_address(other, s)
    return f"http://[{address}]:{s.model_peer_port}" if ":" in address else f"http://{address}:{s.model_peer_port}"


def plan_roles(
    hosts: list[Host], settings_for: Callable[[Host], Settings | None], holds: Callable[[Host, Settings], bool]
) -> dict[str, PeerRole]:
    """Each host's role: one source per model group (see the module's docstring), followers point at it."""
    groups: dict[tuple[str, str], list[tuple[Host, Settings]]] = {}
    for each in hosts:
        s = settings_for(each)
        if s is not None and s.model_peers:
            groups.setdefault((s.model_repo, s.model_revision), []).append((each, s))
    roles: dict[str, PeerRole] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        held = {each.name: holds(each, s) for each, s in members}
        source, source_s = next(((h, s) for h, s in members if held[h.name]), members[0])
        followers = [h.name for h, _ in members if not held[h.name] and h is not source]
        if not followers:
            continue
        roles[source.name] = PeerRole(serve_to=tuple(followers))
        for name in followers:
            roles[name] = PeerRole(source=source.name, url=peer_url(source, source_s))
    return roles


def with_peer(spec: FetchSpec, role: PeerRole, s: Settings) -> FetchSpec:
    """A follower's fetch: from its source, waiting for it half the unit's time at most (the endpoint may
    still have to serve all of it)."""
    if not role.source:
        return spec
    return replace(spec, peer=role.fetch_arg, peer_wait_s=min(s.model_peer_wait_s, s.download_timeout_s // 2))


def serve_peers(s: Settings, role: PeerRole, again: bool = False) -> None:
    """The run's token on both sides; on the source, its model served to the followers (started before their
    downloads: pyinfra runs each operation on every host before the next). `again`: after the driver's
    reboot, a server that is not running any more is started again."""
    if not (role.serve_to or role.source):
        return
    if not again:
        secret_env_file(
            name="Model peer token for this run (root only)",
            path=MODEL_PEER_TOKEN_FILE,
            variable=TOKEN_ENV,  # what the server and the fetch on the box read
            value=Secret(token_for(role)),
        )
    if role.serve_to:
        spec = ServeSpec(
            repo=s.model_repo,
            revision=s.model_revision,
            dest=s.model_dir,
            bind=peer_address(host, s),
            port=s.model_peer_port,
            package=Layout.of(s).host_package,
            timeout_s=s.download_timeout_s + SERVE_GRACE_S,
            followers=role.serve_to,
            idle_exit_s=PEER_IDLE_S,
        )
        what = f"{s.model_repo}@{s.model_revision} to {', '.join(role.serve_to)}"
        model_served(name=f"Serve {what}" + (" (again after a reboot)" if again else ""), spec=spec, again=again)


def end_peering() -> None:
    """Once every host of the run waited for its download: the source's server stopped, the token removed."""
    role = peer_role()
    if role is None:
        return
    model_peering_ended(
        name="Model peer server stopped, this run's token removed"
        if role.serve_to
        else "This run's peer token removed",
        unit=MODEL_SERVE_UNIT if role.serve_to else None,
        token_file=MODEL_PEER_TOKEN_FILE,
    )
