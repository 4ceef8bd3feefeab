"""Which upstream vLLM release wheels the first reference box's SM75 patch set makes a runtime of, and what each needs.

Every row was read from PyPI's wheel of the release (`pip download vllm==V --no-deps`; name, size and sha256 of
the file downloaded): its METADATA's Requires-Dist pins and Requires-Python; the git blob ids of the 9 files the
patch (sm75_patch.VLLM_PATCH) touches, before and after `git apply` of the patch (hunk 2 of qwen_gdn_linear_attn.py
re-inserted the way the owner's scripts/apply_gdn_flashqla_legacy.py step 3 does, where it rejects); the sm_75
ELF images in vllm/_C_stable_libtorch.abi3.so and vllm/_moe_C_stable_libtorch.abi3.so (`cuobjdump --list-elf`,
from PyPI's nvidia-cuda-cuobjdump 13.2.86 wheel); every release listed needs libcudart.so.13 (`readelf -d`), and
its torch pin is PyPI's CUDA 13.0 build. docs/upstream-facts.md has the whole record; tests/real checks the default
release's row against the real wheel and the real patch.

Patch status: "clean" = `git apply --check` passes (each hunk's context found, possibly at an offset);
"clean-with-reinsert" = every hunk but qwen_gdn_linear_attn.py's hunk 2 applies and the owner's step 3 anchor is
in the release, so that hunk is re-inserted by hand; "hunks-to-check" = not examined hunk by hunk (no row has it).
Supported = the patch applies and the release's own FlashInfer pin has a public SM75 fix or needs none
(vllm_rig/known/flashinfer_fix.py): a release pins flashinfer-python exactly, so its FlashInfer cannot be swapped.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_rig.known import flashinfer_fix, sm75_patch

PATCH_STATUSES = ("clean", "clean-with-reinsert", "hunks-to-check")


@dataclass(frozen=True)
class Release:
    version: str
    wheel: str  # PyPI's file name of the release's only Linux x86_64 wheel
    sha256: str
    size: int  # bytes
    requires_python: str
    torch: str  # ==pins of the wheel's METADATA
    torchvision: str
    torchaudio: str
    flashinfer: str  # flashinfer-python
    flashinfer_cubin: str | None  # None: the release does not require flashinfer-cubin
    tilelang: str
    transformers: str  # a specifier, not a pin
    sm75_images: tuple[int, int]  # sm_75 ELF images in _C_stable_libtorch and _moe_C_stable_libtorch
    patch: str  # one of PATCH_STATUSES
    blobs: tuple[tuple[str, str], ...]  # (in the wheel, after the patch): git blob ids, in the patch's file order
    supported: bool
    reason: str  # why it is or is not supported

    def pins(self) -> dict[str, str]:
        """The exact torch and FlashInfer pins of its METADATA, by distribution name."""
        return {
            "torch": self.torch,
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "flashinfer-python": self.flashinfer,
        }

    @property
    def files(self) -> tuple[tuple[str, str, str], ...]:
        """(path, blob in the wheel, blob after the patch) for each of the 9 files the patch touches."""
        paths = [f.path for f in sm75_patch.VLLM_PATCH.files]
        return tuple((path, *pair) for path, pair in zip(paths, self.blobs, strict=True))

    def flashinfer_fix(self) -> str | None:
        """The SM75 fix its own FlashInfer pin takes ("pr3621", "pr3526") or None; ValueError where none exists."""
        return flashinfer_fix.resolve(self.flashinfer, "auto")


CUDA_RUNTIME = "libcudart.so.13"

# The compiled extensions a CUDA build of every listed release has, and the build's check imports: PyPI's 0.26.0
# wheel holds vllm/_C_stable_libtorch.abi3.so and vllm/_moe_C_stable_libtorch.abi3.so and no vllm/_C (its
# CMakeLists.txt builds the legacy _C for ROCm only, lines 355-372 of the 0.26.0 sdist); the server imports the
# first at start (vllm/platforms/cuda.py line 23).
KERNEL_MODULES = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch")

# The patched release's real parser, dumped on CPU (each file's header says how): upstream-<version>-cli-flags.txt,
# read by server_interface.upstream(version).

# ReasoningConfig's init fields with the patch (pydantic, extra="forbid"), the same in 0.24.0 and 0.26.0:
# upstream-0.26.0-config-keys.md.
REASONING_CONFIG_KEYS = (
    "reasoning_parser",
    "reasoning_start_str",
    "reasoning_end_str",
    "default_thinking_token_budget",
)  # what every listed release's compiled extensions load

# 0.25.0 and 0.25.1 hold the same 9 files, before and after the patch.
BLOBS_0_25 = (
    ("ff5546e05ebfaf468c2b10dd6ff1cc3a57f6b14e", "2c2b929b8f6e66d3dc08b8722d3c1616e8b4b4d6"),
    ("13a19b86c0aeb487845512c83fafa98103da1070", "83960aac8022ed62c47336a419e9f755541fed32"),
    ("06bfe5c5de27316be9faaba7ad33094459cebc5d", "e48af055af1bd3c9d289317863fb6ab4e87dbe05"),
    ("acc8366fb1017b1f6e032a1917cda3a3c8548fd4", "f0144c7824f207159396ff07cc82625404d9f191"),
    ("5e2295c0af8a2aeca3f6383a5a10e21fd3d954a1", "25cb9e4db23fb90ace55e163941d0b777722a89e"),
    ("340a304030eaa2287fbc47a9be6cd2a7a6f0fe18", "57a4039b0e60cb0009d2764362b0dd6ff876cf41"),
    ("10a6329f5a0ff3c79228042d29bc7496b64e9950", "a61012372678c8afc14caf6899b0b1acc4f8d392"),
    ("69b35830add2835023cf4b9aa192ef4801553ce9", "e04d45579ac35705aea856bd8d010010ec16d4ce"),
    ("e9b23f1c6162655182b35e4588dc31e6c47aaa89", "9bccdc90ee7fe87354846c2ad9ae046f804d1659"),
)

RELEASES: tuple[Release, ...] = (
    Release(
        version="0.24.0",
        wheel="vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        sha256="2d2831aeba311292250df0132dbc4d8e9f42c654536eaec48e6fe58acb1822cf",
        size=279209310,
        requires_python="<3.15,>=3.10",
        torch="2.11.0",
        torchvision="0.26.0",
        torchaudio="2.11.0",
        flashinfer="0.6.12",
        flashinfer_cubin="0.6.12",
        tilelang="0.1.9",
        transformers=">=5.5.3",
        sm75_images=(55, 15),
        patch="clean-with-reinsert",
        blobs=(
            ("ff5546e05ebfaf468c2b10dd6ff1cc3a57f6b14e", "2c2b929b8f6e66d3dc08b8722d3c1616e8b4b4d6"),
            ("27a85bb3d0e7e292f64340cfdb6988ccf6c74287", "3f1a877dce88f8c4a5d529c3e8e1d54eedb4d9e6"),
            ("06bfe5c5de27316be9faaba7ad33094459cebc5d", "e48af055af1bd3c9d289317863fb6ab4e87dbe05"),
            ("021462f3ee57aa13dab3577cec10445723cdc86c", "30224ad25aede9bc49d3596f18fd61eb3d7d2a56"),
            ("80319003da599df3d7b132a44f1c1508a8f8b4a7", "e01cde69c99559d57feda06931931c8d814c87d4"),
            ("340a304030eaa2287fbc47a9be6cd2a7a6f0fe18", "57a4039b0e60cb0009d2764362b0dd6ff876cf41"),
            ("10a6329f5a0ff3c79228042d29bc7496b64e9950", "a61012372678c8afc14caf6899b0b1acc4f8d392"),
            ("69b35830add2835023cf4b9aa192ef4801553ce9", "e04d45579ac35705aea856bd8d010010ec16d4ce"),
            ("74938a823d9fd4cec8f63f08bc41abc67958825c", "2272ce321a8b34bf841bc7a6eb87955ce95a18d7"),
        ),
        supported=False,
        reason="its own FlashInfer pin, 0.6.12, overflows SM75 shared memory and no public fix applies to it"
        " (the first box ran an unpublished backport)",
    ),
    Release(
        version="0.25.0",
        wheel="vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        sha256="c82e96b01af2142ef398ca92f1e9c5f4ffc119f2cc09fe68ea28865323532f0c",
        size=250099898,
        requires_python="<3.15,>=3.10",
        torch="2.11.0",
        torchvision="0.26.0",
        torchaudio="2.11.0",
        flashinfer="0.6.13",
        flashinfer_cubin="0.6.13",
        tilelang="0.1.9",
        transformers=">=5.5.3",
        sm75_images=(53, 15),
        patch="clean-with-reinsert",
        blobs=BLOBS_0_25,
        supported=False,
        reason="its own FlashInfer pin, 0.6.13, overflows SM75 shared memory and no public fix applies to it",
    ),
    Release(
        version="0.25.1",
        wheel="vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl",
        sha256="16fc7a28df1576eb6f7ca0455026551b8f9adb674c19c66059359ef3e964bd1e",
        size=250100306,
        requires_python="<3.15,>=3.10",
        torch="2.11.0",
        torchvision="0.26.0",
        torchaudio="2.11.0",
        flashinfer="0.6.13",
        flashinfer_cubin="0.6.13",
        tilelang="0.1.9",
        transformers=">=5.5.3",
        sm75_images=(53, 15),
        patch="clean-with-reinsert",
        blobs=BLOBS_0_25,
        supported=False,
        reason="its own FlashInfer pin, 0.6.13, overflows SM75 shared memory and no public fix applies to it",
    ),
    Release(
        version="0.26.0",
        wheel="vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        sha256="adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de",
        size=303698761,
        requires_python="<3.15,>=3.10",
        torch="2.11.0",
        torchvision="0.26.0",
        torchaudio="2.11.0",
        flashinfer="0.6.14",
        flashinfer_cubin=None,
        tilelang="0.1.9",
        transformers=">=5.5.3",
        sm75_images=(54, 15),
        patch="clean",
        blobs=(
            ("ff5546e05ebfaf468c2b10dd6ff1cc3a57f6b14e", "2c2b929b8f6e66d3dc08b8722d3c1616e8b4b4d6"),
            ("67d8fa5a2c652c00a2b7c6cdb0819b550606ff5c", "9e37a6c2840721b8cc3a1ec47725afb0cc8cc189"),
            ("567c063bb3b922f92f1fc9b9128d5ba00a8fcfc8", "673872a25cdd45466a5d426631ceb31e8093f348"),
            ("0620509f2db52c8ee47c241f980d6df17da94c77", "afaaeb4dcc6e37c73619347c485c4ca644404cd4"),
            ("5a029747247db08e68a7438674a5249ce8773bb2", "611d0b25402ac63e45ce3041f37e5d6695cb9b5c"),
            ("70794be0751a43607f2f6996d068e5e96bce07fc", "2da166ffd5d37ddaef578256022ef331bddf88d4"),
            ("10a6329f5a0ff3c79228042d29bc7496b64e9950", "a61012372678c8afc14caf6899b0b1acc4f8d392"),
            ("0f3dc79b98abc35119959bdaa54fbb01f4d8b675", "5423197bfc4eae3b745c09c83dc6c15874190a84"),
            ("f3f0afb1301f35c5ee1c0df820431f8ced56d25b", "abae475fef76e2bc92fb6b88d2ef117d57fc56e9"),
        ),
        supported=True,
        reason="every hunk applies (7 of its 9 files differ from the pre-images, 5 take an offset);"
        " its own FlashInfer pin, 0.6.14, takes PR 3621, which serves an FP16 KV cache only (kv_cache_dtype auto)",
    ),
    Release(
        version="0.27.1",
        wheel="vllm-0.27.1-cp38-abi3-manylinux_2_28_x86_64.whl",
        sha256="98e9fc2a1ed8549a733c9d1b242e2002b82367da9e29e37801761438cb3a2670",
        size=312887766,
        requires_python="<3.15,>=3.10",
        torch="2.13.0",
        torchvision="0.28.0",
        torchaudio="2.11.0",
        flashinfer="0.6.16.post3",
        flashinfer_cubin=None,
        tilelang="0.1.12",
        transformers=">=5.5.3",
        sm75_images=(56, 15),
        patch="clean",
        blobs=tuple((f.pre_blob, f.post_blob) for f in sm75_patch.VLLM_PATCH.files),  # its own target
        supported=True,
        reason="the patch's own target: all 9 pre-images are its files;"
        " its own FlashInfer pin, 0.6.16.post3, needs no SM75 fix",
    ),
)

# The release a profile gets unless it names one: the one the first box's owner runs now (zyYuc's README:
# v0.27.1 + the patch, FlashInfer 0.6.16.post3, torch 2.13.0+cu130), the patch's own target (all 19 hunks apply
# exactly). Its FlashInfer pin carries the SM75 fix upstream merged (PR 3526), whose head-size-256 prefill fits
# SM75's 64 KiB with an FP8 KV cache; 0.26.0's FlashInfer 0.6.14 + PR 3621 does not (flashinfer_fix.fp8_kv_fits).
# 0.28.0 rejects 2 hunks; from 0.29.0 Model Runner V2 is the default, where the patch's budget hunk does nothing.
DEFAULT = "0.27.1"


def supported_versions() -> list[str]:
    return [r.version for r in RELEASES if r.supported]


def release(version: str) -> Release:
    """The table's row for `version`, or ValueError with one sentence a user can act on."""
    works = " or ".join(supported_versions())
    for r in RELEASES:
        if r.version == version:
            if not r.supported:
                raise ValueError(f"vLLM {version} cannot be the upstream runtime: {r.reason}; use {works}")
            return r
    raise ValueError(f"vLLM {version!r} is not in the table of checked upstream releases; use {works}")
