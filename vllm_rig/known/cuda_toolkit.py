"""The CUDA toolkit each PyPI torch release is built with, as its wheel's METADATA pins it
(`cuda-toolkit[cublas,cudart,...]==X`, read with `pip install --dry-run --report` from PyPI):
the upstream runtime kind installs that same release's compiler parts into the venv, because torch's
cpp_extension refuses an nvcc of another major version and the card's toolkit is CUDA 12.9.

The parts a JIT compile needs (FlashInfer's, FlashQLA's extension): nvcc, crt, cccl, cudart, nvvm; installed
they are nvidia/cu13/{bin,include,lib,nvvm} in site-packages (13.0.2 checked: nvcc 13.0.88 builds sm_75).
"""

from __future__ import annotations

DISTRIBUTION = "cuda-toolkit"
PARTS = ("nvcc", "crt", "cccl", "cudart", "nvvm")
FOR_TORCH = {"2.11.0": "13.0.2", "2.13.0": "13.0.3"}

# The triton each PyPI torch release pins (`triton==X` in its METADATA's Requires-Dist, read with pip's --report:
# tests/sandbox/fixtures/pkg_index/closure.json for 2.11.0; docs/upstream-facts.md section 5c for 2.13.0).
TRITON_FOR_TORCH = {"2.11.0": "3.6.0", "2.13.0": "3.7.1"}
