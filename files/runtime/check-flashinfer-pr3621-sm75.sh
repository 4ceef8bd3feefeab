#!/bin/bash
# The vLLM service's ExecStartPre: FlashInfer's FA2 prefill on SM75 (2080 Ti) works only when the headers
# its JIT compiles do not overflow the 64 KiB shared-memory limit. Releases 0.6.10 to 0.6.15.post1 do
# (a 1-byte k_sf_smem placeholder in SharedStorageQKVO); PR 3621 (0.6.14) or PR 3526 (0.6.15, shipped
# from 0.6.16) fixes it. flashinfer-jit-cache's prebuilt kernels ignore the headers, so it must not be
# installed. Exit 0 with one line saying why it is fine; exit 1 with one line saying what is wrong.
# Where the runtime's runtime.json holds the build's shared-memory proof (flashinfer_smem: the probe compiled
# against these headers with the runtime's nvcc), the installed version and prefill.cuh must be the ones proven.
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

# What the build proved by compiling these headers (vllm_rig/host/flashinfer_smem.py), kept in the runtime's
# runtime.json: the same FlashInfer and prefill.cuh must be installed now. No compile here. A runtime built
# before the probe existed has no record: the marker checks alone decide.
record=$(dirname "$(dirname "$(dirname "$python")")")/runtime.json
proven_check() {
    [ -f "$record" ] || return 0
    local proven p_version p_sha p_fits p_kv p_size p_tile sha
    proven=$("$python" -c '
import json, sys
r = json.load(open(sys.argv[1])).get("flashinfer_smem")
if r:
    kv = r["kv"]
    print(r["flashinfer_version"], r["prefill_cuh_sha256"], r["fits"], kv, r[f"sizeof_{kv}_kv"], r["cta_tile_kv"][kv])
' "$record") || fail "could not read the build's record in $record"
    [ -n "$proven" ] || return 0
    read -r p_version p_sha p_fits p_kv p_size p_tile <<<"$proven"
    sha=$(sha256sum "$header" | cut -d' ' -f1)
    [ "$p_version" = "$fi_version" ] && [ "$p_sha" = "$sha" ] || fail "FlashInfer $fi_version's prefill.cuh \
(sha256 $sha) is not the one the build compiled and proved fits SM75 (FlashInfer $p_version, $p_sha); re-run \
the deploy with force_rebuild=true"
    [ "$p_fits" = True ] || fail "the build recorded that FlashInfer $p_version's ${p_kv^^} KV tile ($p_size B) does \
not fit SM75's 65,536 B; re-run the deploy"
    said="$said; the build compiled this prefill.cuh: ${p_kv^^} KV tile $p_size B ($p_tile rows) <= 65,536 B"
}

broken=$(count 'uint8_t[1]> k_sf_smem;')
lo_mma=$(count 'constexpr uint32_t smem_sample_lo_mma = 128;')
smallest=$(count 'Even the smallest KV tile')
vosplit=$(count 'kVOSplitFixedSmem')
kvsf=$(count 'struct KVScaleFactorSmem {};')
pr3526_rest=$(($(count 'struct KVRepackSmem') > 0 && $(count 'struct VOSplitSmem') > 0 && $(count 'k_sf_smem_ptr') > 0))

if [ "$broken" -gt 0 ]; then
    if [ "$lo_mma" -eq 3 ] && [ "$smallest" -eq 0 ] && [ "$vosplit" -eq 0 ]; then
        said="FlashInfer $fi_version carries PR 3621 (SM75 prefill tiles sized to fit)"
        proven_check
        echo "check-flashinfer-sm75: ok: $said"
        exit 0
    fi
    fail "FlashInfer $fi_version overflows SM75's 64 KiB shared memory in FA2 prefill ($header has the 1-byte \
k_sf_smem placeholder and no complete PR 3621 or PR 3526 fix); re-run the deploy, or use 0.6.8.post1 or >= 0.6.16"
fi
# No placeholder: fixed upstream (PR 3526, in 0.6.16+ or applied to 0.6.15) or from before the overflow (<= 0.6.9).
if [ "$kvsf" -gt 0 ] && [ "$pr3526_rest" -eq 1 ]; then
    said="FlashInfer $fi_version carries PR 3526 (scale-factor buffers only when used)"
else
    said="FlashInfer $fi_version has no SM75 shared-memory overflow (no fix needed)"
fi
proven_check
echo "check-flashinfer-sm75: ok: $said"
