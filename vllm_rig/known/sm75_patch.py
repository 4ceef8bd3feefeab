"""The first reference box's SM75 patch set, as facts: where each file lives, what its bytes are, what it changes.

Source: github.com/zyYuc/qwen3-8-27b-dual-2080ti-vllm at commit aa935db3ca230746da85d9478ca7b4be5adc266e (its
initial commit; the repository's own MIT-style licence for its files, the patches being diffs of Apache-2.0 vLLM
and MIT FlashQLA). The files are not copied into this project: a deploy downloads them whole at the commit through
raw content, `git_mirror_prefix` in front (the form of the FlashInfer fix headers in group_data/all.py), and checks
the size, sha256 and git blob id below before using them.

How the facts were checked (docs/upstream-facts.md says it at length): each file's bytes were read at the commit
from the public code index and rebuilt; size, sha256 and `git hash-object` were computed on the rebuilt bytes. The
vLLM patch's 9 pre-image blob ids (its `index` lines, abbreviated) equal the files of PyPI's vllm 0.27.1 wheel
(vllm-0.27.1-cp38-abi3-manylinux_2_28_x86_64.whl, sha256 98e9fc2a...cb3a2670) in full, and applying the patch
there (`git apply`, no offsets) gives the 9 post-image blob ids; the FlashQLA patch's 4 pre-images are
weicj/FlashQLA-SM70-SM75@3ab27d77d8ca01d7a4718903b726add1a8886c0e's files and applying it gives its 4 post-images.
A byte changed anywhere in a patch would change a post-image.
"""

from __future__ import annotations

from dataclasses import dataclass

REPO = "zyYuc/qwen3-8-27b-dual-2080ti-vllm"
COMMIT = "aa935db3ca230746da85d9478ca7b4be5adc266e"
RAW_BASE = "https://raw.githubusercontent.com/"  # what git_mirror_prefix goes in front of, as for FlashInfer's fix


@dataclass(frozen=True)
class PatchedFile:
    path: str  # inside the patched tree (vLLM's or FlashQLA's), as the diff names it
    pre_blob: str  # git blob id of the file the patch was made against (full, 40 hex)
    post_blob: str  # git blob id of that file with the patch applied
    hunks: tuple[str, ...]  # the hunk headers, in order ("@@ -old,len +new,len @@")
    added: int
    removed: int


@dataclass(frozen=True)
class SourceFile:
    path: str  # inside the repository at COMMIT
    size: int  # bytes
    sha256: str
    blob: str  # git hash-object of the bytes
    files: tuple[PatchedFile, ...] = ()  # for a patch: what it changes

    def url(self, git_mirror_prefix: str = "") -> str:
        """The raw-content URL of this file at COMMIT, with the mirror prefix in front."""
        return f"{git_mirror_prefix}{RAW_BASE}{REPO}/{COMMIT}/{self.path}"


VLLM_PATCH = SourceFile(
    path="patches/vllm-v0.27.1-sm75-qwen3.8.patch",
    size=16840,
    sha256="b0bc6e4765e06b23585130ae095047d54efd08689505e171e58130b741d86aa1",
    blob="b870ba64a4ca3e7d54fb11748eef0e50760da84e",
    files=(
        PatchedFile(
            "vllm/config/reasoning.py",
            "ff5546e05ebfaf468c2b10dd6ff1cc3a57f6b14e",
            "2c2b929b8f6e66d3dc08b8722d3c1616e8b4b4d6",
            ("@@ -26,6 +26,10 @@",),
            4,
            0,
        ),
        PatchedFile(
            "vllm/envs.py",
            "4587139f1b9b6ff1e79809fec3ea4b4db334259c",
            "eb369a4f1f298d06cb6b00fe88b8a30c2d1266f8",
            ("@@ -47,6 +47,8 @@", "@@ -850,6 +852,18 @@"),
            14,
            0,
        ),
        PatchedFile(
            "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py",
            "567c063bb3b922f92f1fc9b9128d5ba00a8fcfc8",
            "673872a25cdd45466a5d426631ceb31e8093f348",
            (
                "@@ -84,7 +84,7 @@",
                "@@ -126,6 +126,8 @@",
                "@@ -146,6 +148,7 @@",
                "@@ -160,6 +163,96 @@",
                "@@ -229,6 +322,8 @@",
                "@@ -338,6 +433,38 @@",
            ),
            128,
            1,
        ),
        PatchedFile(
            "vllm/model_executor/models/qwen3_5_mtp.py",
            "6421c8b60d2d71fa20ad974c73bfbbbc5af19f47",
            "0558c6344a0cd34d55f6823f6337b72187c0886c",
            ("@@ -1,3 +1,4 @@", "@@ -78,6 +79,8 @@", "@@ -88,11 +91,24 @@"),
            17,
            1,
        ),
        PatchedFile(
            "vllm/v1/attention/backends/flashinfer.py",
            "5251e25e5e4cf210b31181df65369b1a5080a66d",
            "9ef0d897c8ddd91a6cd91983bac480ece4bddb52",
            ("@@ -460,12 +460,11 @@",),
            5,
            6,
        ),
        PatchedFile(
            "vllm/v1/attention/backends/gdn_attn.py",
            "0b32dfcf9444b70e22f63950f6ca53998a5d4339",
            "62d1d84675e104b7aa101245dcbbb9ff4148a003",
            ("@@ -100,7 +100,7 @@",),
            1,
            1,
        ),
        PatchedFile(
            "vllm/v1/engine/input_processor.py",
            "1fe460b54af4e184d73676e91914dc72a31d38b3",
            "dffb6b14faaf9b1bbdc301e3826a04ee5be70919",
            ("@@ -124,6 +124,20 @@",),
            14,
            0,
        ),
        PatchedFile(
            "vllm/v1/sample/ops/topk_topp_sampler.py",
            "c83ac7c4b90e696add8655e6d0a2cbdee6ef5bbe",
            "e3501ca8cad00481e33fe85bca99d29b9cedd5a4",
            ("@@ -54,9 +54,21 @@",),
            15,
            3,
        ),
        PatchedFile(
            "vllm/v1/worker/gpu_model_runner.py",
            "859cec27810831e45a4ebe24df1d5e4383f0ef33",
            "7ee269b4a107d706c500b22e0a7e9e7b6735c85a",
            ("@@ -484,6 +484,11 @@", "@@ -2158,6 +2163,13 @@", "@@ -2194,6 +2206,11 @@"),
            17,
            0,
        ),
    ),
)

# For weicj/FlashQLA-SM70-SM75 at FLASHQLA_COMMIT: the hopper imports wrapped in try/except on "sm90", and the
# legacy extension's TORCH_CUDA_ARCH_LIST default set to "7.5". FlashQLA's setup.py there pins tilelang==0.1.8,
# which no vLLM release from 0.24.0 on accepts (0.1.9, 0.1.12): FlashQLA stays off pip's resolver.
FLASHQLA_REPO = "weicj/FlashQLA-SM70-SM75"
FLASHQLA_COMMIT = "3ab27d77d8ca01d7a4718903b726add1a8886c0e"
FLASHQLA_PATCH = SourceFile(
    path="patches/flashqla-sm70-sm75-local.patch",
    size=2595,
    sha256="49a2d1376098315d81bd4910c18d92772e0c5f1ddf09f880052d5f6598b300e6",
    blob="2b0e49ec7edcae616c41565bd2494b50bd141aec",
    files=(
        PatchedFile(
            "flash_qla/__init__.py",
            "640f6845506b207517657ba89c4b63647884ddaf",
            "d777f16246753392af5b4a73db332a2c9db1df5f",
            ("@@ -3,11 +3,18 @@",),
            12,
            5,
        ),
        PatchedFile(
            "flash_qla/ops/__init__.py",
            "70df152c617d8dad5d0420fbdf3c3a9e59518fa6",
            "e7cb3b0e50de966a7fdbafe96360aa9223fbdc25",
            ("@@ -1,7 +1,12 @@",),
            6,
            1,
        ),
        PatchedFile(
            "flash_qla/ops/gated_delta_rule/__init__.py",
            "ea07eebdb000e2a76edf47cc2aef3cbbf16f8105",
            "76fc202056f416f2def5e0513c7a2a07d085b93a",
            ("@@ -1,7 +1,12 @@",),
            6,
            1,
        ),
        PatchedFile(
            "flash_qla/ops/gated_delta_rule/legacy/sm_legacy.py",
            "c0bbe451ea086132b04512c05a3e9d68e26eace7",
            "f771e138a34bddb2366cd36ec9037c623912b56a",
            ("@@ -20,7 +20,7 @@",),
            1,
            1,
        ),
    ),
)

# The owner's script for hunks `git apply` rejects in qwen_gdn_linear_attn.py (run in the vLLM tree's root).
# Only its step 3 matters for the releases in upstream_releases.py (before 0.26.0, hunk 2 of that file rejects:
# 0.24.0 and 0.25.x have another block just above the anchor): it inserts REINSERT_LINES before REINSERT_ANCHOR,
# at its first occurrence, unless `if backend == "flashqla_legacy":` already comes before it. Steps 1 and 2 skip
# themselves once the rest of the patch is applied (the function exists, the signature is already widened).
GDN_SCRIPT = SourceFile(
    path="scripts/apply_gdn_flashqla_legacy.py",
    size=4976,
    sha256="b789d6bfff2a307b89979c86c99fae9baffa33974671a0d45fa216d0409cbedd",
    blob="9e27e5c317c0dc923f626065afb75e4a7e177d19",
)
REINSERT_FILE = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py"
REINSERT_HUNK = 2  # 1-based, of REINSERT_FILE's hunks in VLLM_PATCH
REINSERT_ANCHOR = (
    '    if backend in ["flashinfer", "auto"] and supports_flashinfer:\n        return backend, "flashinfer"'
)
REINSERT_LINES = '    if backend == "flashqla_legacy":\n        return backend, "flashqla_legacy"\n'


def patched(path: str) -> PatchedFile:
    """The vLLM patch's entry for `path`, or KeyError."""
    for f in VLLM_PATCH.files:
        if f.path == path:
            return f
    raise KeyError(path)
