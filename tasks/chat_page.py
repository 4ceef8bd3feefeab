"""Chat page (chat_page: true): Open WebUI for the household on chat_page_port, behind the box's nginx with
the LAN's TLS, talking to the server on loopback; off by default.

The stage lives in vllm_rig/stages/chat_page/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.chat_page.deploy import serve_chat_page

run_stage(serve_chat_page)
