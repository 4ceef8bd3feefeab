"""The upstream release table and the SM75 patch facts agree with each other and with the FlashInfer fix table.

The rows themselves were read from the real wheels; tests/real/test_real_upstream_patch.py checks the default
release's row against PyPI's wheel and the real patch. These checks catch a row edited by hand into
contradiction: a release called supported whose FlashInfer no fix exists for, a post-image that cannot be.
"""

from __future__ import annotations

import re

import pytest

from vllm_rig.known import flashinfer_fix, server_interface, sm75_patch, upstream_releases

ROWS = {r.version: r for r in upstream_releases.RELEASES}
HEX40 = re.compile(r"[0-9a-f]{40}")


def _flashinfer_ok(version: str) -> bool:
    try:
        flashinfer_fix.resolve(version, "auto")
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("version", ROWS)
def test_supported_means_the_patch_applies_and_the_release_flashinfer_can_be_fixed(version: str) -> None:
    r = ROWS[version]
    assert r.patch in upstream_releases.PATCH_STATUSES
    can = r.patch in ("clean", "clean-with-reinsert") and _flashinfer_ok(r.flashinfer)
    assert r.supported == can, f"{version}: supported={r.supported}, but patch {r.patch}, FlashInfer {r.flashinfer}"


@pytest.mark.parametrize("version", ROWS)
def test_each_row_names_the_patch_files_in_the_patch_order_with_full_blob_ids(version: str) -> None:
    r = ROWS[version]
    assert [f[0] for f in r.files] == [f.path for f in sm75_patch.VLLM_PATCH.files]
    for path, before, after in r.files:
        assert HEX40.fullmatch(before) and HEX40.fullmatch(after), path
        assert before != after, f"{version}: {path} unchanged by the patch"
    assert r.wheel == f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert re.fullmatch(r"[0-9a-f]{64}", r.sha256)


def test_the_patch_target_release_holds_every_pre_image_and_gives_every_post_image() -> None:
    target = ROWS["0.27.1"]
    for (path, before, after), f in zip(target.files, sm75_patch.VLLM_PATCH.files, strict=True):
        assert (path, before, after) == (f.path, f.pre_blob, f.post_blob)


def test_a_file_the_release_shares_with_the_target_patches_to_the_same_post_image() -> None:
    post = {f.path: (f.pre_blob, f.post_blob) for f in sm75_patch.VLLM_PATCH.files}
    for r in upstream_releases.RELEASES:
        for path, before, after in r.files:
            if before == post[path][0] and not (r.patch == "clean-with-reinsert" and path == sm75_patch.REINSERT_FILE):
                assert after == post[path][1], f"{r.version}: {path}"


def test_the_default_release_is_supported_and_its_flashinfer_needs_no_fix_and_serves_fp8_kv() -> None:
    r = upstream_releases.release(upstream_releases.DEFAULT)
    assert r.version == "0.27.1" and r.supported and r.patch == "clean"
    assert flashinfer_fix.resolve(r.flashinfer, "auto") is None is r.flashinfer_fix()
    assert flashinfer_fix.fp8_kv_fits(r.flashinfer, None)
    older = upstream_releases.release("0.26.0")
    assert older.flashinfer_fix() == "pr3621" and not flashinfer_fix.fp8_kv_fits(older.flashinfer, "pr3621")
    with pytest.raises(ValueError, match="0.6.12 overflows SM75 shared memory"):
        ROWS["0.24.0"].flashinfer_fix()


@pytest.mark.parametrize("version", ["0.24.0", "0.25.1"])
def test_an_unsupported_release_is_refused_naming_why_and_what_works(version: str) -> None:
    with pytest.raises(ValueError) as err:
        upstream_releases.release(version)
    text = str(err.value)
    assert f"vLLM {version}" in text and ROWS[version].flashinfer in text
    assert "0.26.0" in text and "0.27.1" in text and "\n" not in text


def test_a_release_not_in_the_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"vLLM '0\.27\.0' is not in the table .*; use 0\.26\.0 or 0\.27\.1"):
        upstream_releases.release("0.27.0")


def test_patch_facts_add_up() -> None:
    p = sm75_patch.VLLM_PATCH
    assert len(p.files) == 9 and sum(len(f.hunks) for f in p.files) == 19
    assert sm75_patch.patched(sm75_patch.REINSERT_FILE).hunks[sm75_patch.REINSERT_HUNK - 1] == "@@ -126,6 +126,8 @@"
    for f in (*p.files, *sm75_patch.FLASHQLA_PATCH.files):
        assert HEX40.fullmatch(f.pre_blob) and HEX40.fullmatch(f.post_blob) and f.pre_blob != f.post_blob
        assert len(f.hunks) >= 1 and f.added >= 1


def test_the_download_url_is_the_raw_path_at_the_commit_behind_the_mirror_prefix() -> None:
    url = sm75_patch.VLLM_PATCH.url("https://proxy.example/")
    assert url == (
        "https://proxy.example/https://raw.githubusercontent.com/zyYuc/qwen3-8-27b-dual-2080ti-vllm/"
        "aa935db3ca230746da85d9478ca7b4be5adc266e/patches/vllm-v0.27.1-sm75-qwen3.8.patch"
    )
    assert sm75_patch.GDN_SCRIPT.url().startswith("https://raw.githubusercontent.com/zyYuc/")


@pytest.mark.parametrize("version", ["0.24.0", "0.26.0"])
def test_the_first_setups_every_flag_is_in_the_patched_releases_dumped_parser(version: str) -> None:
    from tests.unit.seed_units import SEED1_ARGS

    known = server_interface.upstream(version).flags()
    assert [k for k, _ in SEED1_ARGS if k not in known] == []
    assert "--device-ids" in known and "--disable-log-requests" not in known


@pytest.mark.parametrize("version", ["0.24.0", "0.26.0", "0.27.1"])
def test_each_dumped_flag_file_holds_as_many_flags_as_its_header_counts(version: str) -> None:
    path = server_interface.upstream_flags_file(version)
    count = re.search(r"^# COUNT: (\d+) lines below", path.read_text(), re.M)
    assert count is not None
    assert len(server_interface.upstream(version).flags()) == int(count.group(1))
    assert f"vLLM {version}" in path.read_text().splitlines()[1]


def test_a_release_whose_parser_was_not_dumped_is_named() -> None:
    known = r"flags are known for 0\.24\.0, 0\.26\.0, 0\.27\.1"
    with pytest.raises(ValueError, match=r"vLLM 0\.25\.1's patched parser has not been dumped.*" + known):
        server_interface.upstream("0.25.1")


def test_the_budget_key_is_a_reasoning_config_key_only_with_the_patch() -> None:
    from vllm_rig.known import fork_interface

    assert "default_thinking_token_budget" in upstream_releases.REASONING_CONFIG_KEYS
    assert "default_thinking_token_budget" not in fork_interface.REASONING_CONFIG_KEYS
