"""LAN: nginx from the distribution in front of the server (lan_serving: proxy): the API key on every path,
/metrics from loopback and lan_metrics_allow only, clients from lan_allow, TLS with a local CA or your
certificate; or, with lan_serving: direct, no proxy and one line saying what the server exposes.

The stage lives in vllm_rig/stages/lan/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.lan.deploy import serve_lan

run_stage(serve_lan)
