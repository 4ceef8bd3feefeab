#!/bin/bash
# The vLLM service's ExecStartPre: FlashInfer's FA2 prefill on SM75 (2080 Ti) works only when the headers
# its JIT compiles do not overflow the 64 KiB shared-memory limit. Releases 0.6.10 to 0.6.15.post1 do
# (a 1-byte k_sf_smem placeholder in SharedStorageQKVO); PR 3621 (0.6.14) or PR 3526 (0.6.15, shipped
# from 0.6.16) fixes it. flashinfer-jit-cache's prebuilt kernels ignore the headers, so it must not be
# installed. Exit 0 with one line saying why it is fine; exit 1 with one line saying what is wrong.
#
#   check-flashinfer-pr3621-sm75.sh [PYTHON]    PYTHON: the runtime's python (default: <install_root>/current)
#
# Markers (from FlashInfer's history; see the README):
#   broken   "uint8_t[1]> k_sf_smem;"                                    0.6.10 .. 0.6.15.post1 unpatched
#   PR 3621  "constexpr uint32_t smem_sample_lo_mma = 128;" x3, and neither
#            "Even the smallest KV tile" nor "kVOSplitFixedSmem" left
#   PR 3526  "struct KVScaleFactorSmem {};", "struct KVRepackSmem", "struct VOSplitSmem", "k_sf_smem_ptr"
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
python=${1:-$here/../current/venv/bin/python}

fail() {
    echo "check-flashinfer-sm75: FAIL: $*" >&2
    exit 1
}

[ -x "$python" ] || fail "no runtime python at $python"

# Where flashinfer is and what is installed, without importing it (that would load torch and CUDA).
info=$("$python" - <<'EOF'
import importlib.metadata as md
import importlib.util
import os

def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return ""

spec = importlib.util.find_spec("flashinfer")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")
print(version("flashinfer-python") or "unknown")
print(version("flashinfer-jit-cache") or ("present" if importlib.util.find_spec("flashinfer_jit_cache") else ""))
EOF
) || fail "$python could not look up FlashInfer"

package=$(sed -n 1p <<<"$info")
fi_version=$(sed -n 2p <<<"$info")
jit_cache=$(sed -n 3p <<<"$info")

[ -n "$package" ] || fail "flashinfer is not installed for $python"
[ -z "$jit_cache" ] || fail "flashinfer-jit-cache $jit_cache is installed: its prebuilt kernels bypass the patched \
headers; run: $python -m pip uninstall -y flashinfer-jit-cache"

header=$package/data/include/flashinfer/attention/prefill.cuh
[ -f "$header" ] || fail "FlashInfer $fi_version has no JIT header $header"

count() { grep -cF -- "$1" "$header" || true; }

broken=$(count 'uint8_t[1]> k_sf_smem;')
lo_mma=$(count 'constexpr uint32_t smem_sample_lo_mma = 128;')
smallest=$(count 'Even the smallest KV tile')
vosplit=$(count 'kVOSplitFixedSmem')
kvsf=$(count 'struct KVScaleFactorSmem {};')
pr3526_rest=$(($(count 'struct KVRepackSmem') > 0 && $(count 'struct VOSplitSmem') > 0 && $(count 'k_sf_smem_ptr') > 0))

if [ "$broken" -gt 0 ]; then
    if [ "$lo_mma" -eq 3 ] && [ "$smallest" -eq 0 ] && [ "$vosplit" -eq 0 ]; then
        echo "check-flashinfer-sm75: ok: FlashInfer $fi_version carries PR 3621 (SM75 prefill tiles sized to fit)"
        exit 0
    fi
    fail "FlashInfer $fi_version overflows SM75's 64 KiB shared memory in FA2 prefill ($header has the 1-byte \
k_sf_smem placeholder and no complete PR 3621 or PR 3526 fix); re-run the deploy, or use 0.6.8.post1 or >= 0.6.16"
fi
# No placeholder: fixed upstream (PR 3526, in 0.6.16+ or applied to 0.6.15) or from before the overflow (<= 0.6.9).
if [ "$kvsf" -gt 0 ] && [ "$pr3526_rest" -eq 1 ]; then
    echo "check-flashinfer-sm75: ok: FlashInfer $fi_version carries PR 3526 (scale-factor buffers only when used)"
else
    echo "check-flashinfer-sm75: ok: FlashInfer $fi_version has no SM75 shared-memory overflow (no fix needed)"
fi
