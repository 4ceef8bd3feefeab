"""lan_serving: direct names every path vLLM 0.27.1 serves without its key (issue 35): the lists in
vllm_rig/known/server_routes.py against every route the real wheel declares (tests/unit/fixtures/
vllm-0.27.1-routes.json, extracted from the wheel it names; tests/real/test_real_server_routes.py re-reads it)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_rig.known import server_routes, upstream_releases
from vllm_rig.settings import Settings

DATA = json.loads((Path(__file__).parent / "fixtures" / "vllm-0.27.1-routes.json").read_text())


def test_the_data_is_the_default_releases_wheel() -> None:
    release = upstream_releases.release(server_routes.RELEASE)
    assert DATA["source"]["wheel"] == release.wheel and DATA["source"]["sha256"] == release.sha256


def test_the_guarded_prefixes_are_the_wheels() -> None:
    assert tuple(DATA["guarded_prefixes"]) == server_routes.GUARDED_PREFIXES


def _guarded(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in server_routes.GUARDED_PREFIXES)


def test_every_unguarded_route_of_the_wheel_is_named_open_or_opt_in() -> None:
    unguarded = {path for path in DATA["routes"] if not _guarded(path)}
    named = set(server_routes.OPEN_PATHS) | set(server_routes.OPT_IN)
    assert unguarded - named == set(), "the wheel serves these without the key and the warning does not say so"
    declared = set(server_routes.OPEN_PATHS) - set(server_routes.FASTAPI_DEFAULTS) - set(server_routes.MOUNTED)
    assert declared - unguarded == set() and set(server_routes.OPT_IN) - unguarded == set()
    assert not set(server_routes.OPEN_PATHS) & set(server_routes.OPT_IN)
    assert {"/invocations", "/generative_scoring"} <= set(server_routes.OPEN_PATHS)  # these run the model


def test_the_warning_and_the_settings_text_name_them() -> None:
    from vllm_rig.stages.lan import deploy

    for path in server_routes.OPEN_PATHS:
        assert path in deploy.OPEN_PATHS
    allowed = Settings.model_fields["lan_serving"].json_schema_extra["allowed"]  # type: ignore[index]
    assert "/v1 only" not in allowed and "/v1, /v2, /inference" in allowed
