"""CUDA: the pinned toolkit (cuda-toolkit-<major>-<minor>, no driver metapackages), /usr/local/cuda held on
it, CUDA_HOME and PATH for login shells, and a check that nvcc and the static libraries the fork's build
needs are there.

The stage lives in vllm_rig/stages/cuda/; this file is its entry (it also runs alone)."""

from vllm_rig.context import run_stage
from vllm_rig.stages.cuda.deploy import install_cuda

run_stage(install_cuda)
