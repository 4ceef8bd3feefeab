"""Request paths that nginx normalises to one path while the server routes the raw one (issue 23), and their
neighbours: from a client in lan_allow but not in lan_metrics_allow, each must be refused (400 or 403), with
the key or without. Used by tests/unit/test_lan_nginx.py (this machine's nginx) and tests/e2e/test_lan_stage.py
(the sandbox's, from a LAN namespace)."""

BYPASS = (
    "/metrics",
    "/metrics/",
    "/metricsx",
    "/%6detrics",
    "/metrics/../health",
    "/metrics/../v1/models",
    "/metrics/./x/../../health",
    "/metrics%2F..%2Fhealth",
    "/metrics%2f..%2fv1%2fmodels",
    "/metrics/%2e%2e/health",
    "/metrics/%2E%2E/v1/models",
    "/metrics/.%2e/health",
    "/metrics%5c..%5chealth",
    "/metrics\\..\\health",
    "//metrics",
    "/v1//../metrics",
    "/health/../metrics",
    "/v1/models/../../metrics",
    "/./metrics",
    "/metrics/.",
    "/metrics/..",
    "/metrics/..?x=1",
)
