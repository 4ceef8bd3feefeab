"""Front: one URL for several boxes that serve the same model (front_of on the box that answers for them):
nginx's upstream over this box and those, each box's key put in behind it and its certificate checked against
its own CA; with front_of empty, no front.

The stage lives in vllm_rig/stages/front/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.front.deploy import serve_front

run_stage(serve_front)
