"""What vLLM 0.27.1 (the upstream kind's default release) serves without its --api-key, read from the wheel's
source (docs/upstream-facts.md §6.6; tests/unit/fixtures/vllm-0.27.1-routes.json holds every route the wheel
declares, extracted by `python -m vllm_rig.known.server_routes WHEEL`; tests/unit/test_server_routes.py compares
these lists with it, tests/real/test_real_server_routes.py the file with the wheel).

Its AuthenticationMiddleware checks the key only on paths under GUARDED_PREFIXES. `lan_serving: direct` puts the
server itself on the LAN, so every other path it serves answers anyone who reaches the port: OPEN_PATHS (with
default flags) names them all in the deploy's warning; OPT_IN names the rest, and why they are off by default.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile

RELEASE = "0.27.1"
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")

# Served without the key with the flags this rig renders. /invocations runs chat or completions and
# /generative_scoring runs the model; /docs, /redoc, /openapi.json are FastAPI's own; /metrics is mounted.
OPEN_PATHS = (
    "/invocations",
    "/generative_scoring",
    "/tokenize",
    "/detokenize",
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/ping",
    "/health",
    "/load",
    "/version",
    "/metrics",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/openapi.json",
)
FASTAPI_DEFAULTS = ("/docs/oauth2-redirect", "/redoc", "/openapi.json")  # no decorator in the wheel
MOUNTED = ("/metrics",)  # the Instrumentator's expose and a Mount, no route decorator

# Declared in the wheel, unguarded, but not served by this rig's server: each needs what the rig never sets.
OPT_IN = {
    "/abort_requests": "--tokens-only or VLLM_SERVER_DEV_MODE",
    "/classify": "a pooling model",
    "/pooling": "a pooling model",
    "/rerank": "a pooling model",
    "/score": "a pooling model",
    "/collective_rpc": "VLLM_SERVER_DEV_MODE",
    "/finish_weight_update": "VLLM_SERVER_DEV_MODE",
    "/get_world_size": "VLLM_SERVER_DEV_MODE",
    "/init_weight_transfer_engine": "VLLM_SERVER_DEV_MODE",
    "/is_paused": "VLLM_SERVER_DEV_MODE",
    "/is_sleeping": "VLLM_SERVER_DEV_MODE",
    "/pause": "VLLM_SERVER_DEV_MODE",
    "/reset_encoder_cache": "VLLM_SERVER_DEV_MODE",
    "/reset_mm_cache": "VLLM_SERVER_DEV_MODE",
    "/reset_prefix_cache": "VLLM_SERVER_DEV_MODE",
    "/resume": "VLLM_SERVER_DEV_MODE",
    "/server_info": "VLLM_SERVER_DEV_MODE",
    "/sleep": "VLLM_SERVER_DEV_MODE",
    "/start_draft_weight_update": "VLLM_SERVER_DEV_MODE",
    "/start_weight_update": "VLLM_SERVER_DEV_MODE",
    "/update_weight_version": "VLLM_SERVER_DEV_MODE",
    "/update_weights": "VLLM_SERVER_DEV_MODE",
    "/wake_up": "VLLM_SERVER_DEV_MODE",
    "/weight_info": "VLLM_SERVER_DEV_MODE",
    "/fault_tolerance/apply": "--enable-fault-tolerance",
    "/fault_tolerance/status": "--enable-fault-tolerance",
    "/ready": "the data-parallel supervisor (dp_supervisor.py)",
    "/readyz": "the data-parallel supervisor (dp_supervisor.py)",
    "/start_profile": "a profiler config",
    "/stop_profile": "a profiler config",
    "/static": "--enable-offline-docs",
    "/tokenizer_info": "--enable-tokenizer-info-endpoint",
}


ROUTE = re.compile(r"""\.(?:get|post|put|delete|patch|api_route|add_api_route|mount|route)\(\s*["'](/[^"']*)["']""")
PREFIX = re.compile(r"^GUARDED_PREFIX\s*=\s*\(([^)]*)\)", re.M)


def extract(wheel: str) -> dict[str, object]:
    """Every route path the wheel's entrypoints declare (the first string argument of a route decorator or
    add_api_route/mount call), with the files that declare it, and the middleware's guarded prefixes."""
    routes: dict[str, list[str]] = {}
    prefixes: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if not (name.startswith("vllm/entrypoints/") and name.endswith(".py")):
                continue
            source = z.read(name).decode()
            for path in ROUTE.findall(source):
                routes.setdefault(path, [])
                if name not in routes[path]:
                    routes[path].append(name)
            found = PREFIX.search(source)
            if found:
                prefixes = re.findall(r"""["']([^"']+)["']""", found.group(1))
    return {"guarded_prefixes": prefixes, "routes": dict(sorted(routes.items()))}


if __name__ == "__main__":  # python -m vllm_rig.known.server_routes WHEEL > tests/unit/fixtures/vllm-0.27.1-routes.json
    print(json.dumps(extract(sys.argv[1]), indent=1))
