"""The service's system user, made the same way by every stage that needs it."""

from __future__ import annotations

from pyinfra.operations import server

from vllm_rig.layout import Layout


def service_user(layout: Layout, gpu_groups: list[str]) -> None:
    """A system user with a home for its caches (HF, FlashInfer, Triton, torch extensions) and the groups
    that own /dev/nvidia* and /dev/dri where a distribution restricts them (only those that exist)."""
    server.user(
        name=f"System user {layout.service_user} (home {layout.service_home} holds its caches)",
        user=layout.service_user,
        system=True,
        home=layout.service_home,
        create_home=True,
        shell="/usr/sbin/nologin",
        groups=gpu_groups,
    )
