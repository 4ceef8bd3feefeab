"""The routes data file (tests/unit/fixtures/vllm-0.27.1-routes.json) is what the real 0.27.1 wheel declares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_rig.known import server_routes, upstream_releases

CACHE = Path.home() / ".cache" / "vllm-rig-sandbox" / "upstream" / "wheels"
DATA = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "vllm-0.27.1-routes.json"


def test_the_data_file_is_the_wheels_routes() -> None:
    wheel = CACHE / upstream_releases.release(server_routes.RELEASE).wheel
    if not wheel.is_file():
        pytest.skip(f"no {wheel.name} in the sandbox cache (tests/real/test_real_upstream_patch.py downloads it)")
    data = json.loads(DATA.read_text())
    assert {k: data[k] for k in ("guarded_prefixes", "routes")} == server_routes.extract(str(wheel))
