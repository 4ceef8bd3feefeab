"""Preflight verdict rules: each failing situation names its way out; a healthy rig says GO."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.gpu_xml import record
from tests.unit.groupdata import profile_data
from vllm_rig.stages.preflight import checks as preflight
from vllm_rig.stages.preflight import facts
from vllm_rig.stages.preflight.facts import HostState
from vllm_rig.stages.preflight.gpu_facts import NvidiaGpus
from vllm_rig.validation import load_settings

SETTINGS = load_settings(profile_data())
OUTPUTS = Path(__file__).parent / "fixtures" / "tool_outputs"


def _real(name: str) -> list[str]:
    """A real output (tests/unit/fixtures/tool_outputs/<box>/<name>.out; the box's README says whence)."""
    return (OUTPUTS / f"{name}.out").read_text().splitlines()


def _real_err(name: str) -> list[str]:
    """Its stderr (the .err file beside it): what `2>&1` in the fact's command hands the parser."""
    return (OUTPUTS / f"{name}.err").read_text().splitlines()


def _topology(kind: str, grant: str = "OK", count: int = 4, **changes: Any) -> dict[str, Any]:
    """The links as the GPU reader's record carries them (vllm_rig/host/nvml.py Links): `kind` and `grant`
    between every pair of `count` GPUs, no link states unless `changes` give them."""
    names = [f"GPU{i}" for i in range(count)]
    links = {"error": None, "nvlink": {}, "nvlink_down": []}
    links |= {"topo": {a: {b: kind for b in names if b != a} for a in names}}
    links |= {"p2p": {a: {b: grant for b in names if b != a} for a in names}}
    return links | changes


def _with(gpus: dict[str, Any], links: dict[str, Any] | None) -> dict[str, Any]:
    return {**gpus, "links": links}


HEALTHY_HOST: dict[str, Any] = {
    "os": {"id": "ubuntu", "version_id": "24.04", "pretty": "Ubuntu 24.04.4 LTS"},
    "kernel": "6.17.0-29-generic",
    "arch": "x86_64",
    "cpus": 16,
    "ram_gb": 47.0,
    "disk_free_gb": 400.0,
    "pci_gpus": {
        "available": True,
        "devices": [
            {"slot": "0000:06:00.0", "class": "0300", "device_id": "1e07"},
            {"slot": "0000:07:00.0", "class": "0300", "device_id": "1e04"},
        ],
    },
    "secure_boot": False,
    "secure_boot_source": "mokutil --sb-state",
    "mok": {
        "key": "/var/lib/shim-signed/mok/MOK.priv",
        "cert": "/var/lib/shim-signed/mok/MOK.der",
        "key_present": True,
        "state": "not_enrolled",
        "detail": "/var/lib/shim-signed/mok/MOK.der is not enrolled",
    },
    "pci_bar1_mib": {"0000:06:00.0": 32768, "0000:07:00.0": 32768},
    "cuda_sources": [],
    "modules": [],
    "driver_loaded": None,
    "driver_flavour": None,
    "headers": True,
    "packages": {},
    "holds": [],
    "dpkg_locked": False,
    "nouveau_blacklisted": False,
    "boot_id": "8bcb94c5-aaf3-4e73-8bdd-d9dc9eb181c4",
    "rig_driver": None,
}


def _gpu(index: int, **changes: Any) -> dict[str, Any]:
    gpu = {
        "index": index,
        "name": "NVIDIA GeForce RTX 2080 Ti",
        "memory_mib": 22528,
        "architecture": "Turing",
        "compute_cap": "7.5",
        "pcie_width": 8,
    }
    gpu.update(changes)
    return gpu


TOPO = {
    "error": None,
    "topo": {"GPU0": {"GPU1": "NV2"}},
    "p2p": {"GPU0": {"GPU1": "OK"}},
    "nvlink": {0: [25.781, 25.781], 1: [25.781, 25.781]},
    "nvlink_down": [],
}
GPUS = {
    "rc": 0,
    "error": None,
    "problem": None,
    "driver_version": "580.159.03",
    "gpus": [_gpu(0), _gpu(1)],
    "links": TOPO,
}


def _host(**changes: Any) -> dict[str, Any]:
    host = copy.deepcopy(HEALTHY_HOST)
    host.update(changes)
    return host


def _failed(checks: list[preflight.Check]) -> dict[str, preflight.Check]:
    return {c.name: c for c in checks if c.status == "fail"}


def test_fresh_box_before_driver_is_go() -> None:
    checks = preflight.verdict(_host(), None, SETTINGS)
    assert not preflight.has_failures(checks)


def test_box_with_pinned_driver_and_nvlink_is_go() -> None:
    host = _host(packages={"nvidia-driver-cuda": "580.159.03-1"}, driver_loaded="580.159.03")
    checks = preflight.verdict(host, _with(GPUS, TOPO), SETTINGS)
    assert not preflight.has_failures(checks)
    assert {c.name: c.status for c in checks}["nvlink"] == "ok"


@pytest.mark.parametrize(
    ("changes", "check", "way_out"),
    [
        ({"os": {"id": "ubuntu", "version_id": "22.04", "pretty": "Ubuntu 22.04"}}, "os", "Ubuntu 24.04"),
        ({"arch": "aarch64"}, "os", "x86_64"),
        ({"ram_gb": 8.0}, "ram", "add RAM"),
        ({"disk_free_gb": 20.0}, "disk", "bigger disk"),
        (
            {
                "pci_gpus": {
                    "available": True,
                    "devices": [{"slot": "0000:06:00.0", "class": "0300", "device_id": "1e07"}],
                }
            },
            "pci",
            "reseat",
        ),
        ({"secure_boot": True}, "secure boot", "mokutil --import"),
        ({"packages": {"nvidia-driver-cuda": "550.54.15-1"}}, "driver", "nvidia_driver_replace_existing=true"),
    ],
)
def test_failures_name_their_way_out(changes: dict[str, Any], check: str, way_out: str) -> None:
    failed = _failed(preflight.verdict(_host(**changes), None, SETTINGS))
    assert list(failed) == [check]
    assert way_out in failed[check].way_out


def test_secure_boot_gives_both_ways_out() -> None:
    [check] = _failed(preflight.verdict(_host(secure_boot=True), None, SETTINGS)).values()
    assert "disable Secure Boot" in check.way_out and "MokManager" in check.way_out
    assert "sudo mokutil --import /var/lib/shim-signed/mok/MOK.der" in check.way_out  # Ubuntu's dkms key
    assert "secure_boot_mok_enrollment=deploy_stages" in check.way_out


def _mok(**changes: Any) -> dict[str, Any]:
    return {**HEALTHY_HOST["mok"], **changes}


def test_secure_boot_passes_when_the_signing_key_is_enrolled() -> None:
    checks = {c.name: c for c in preflight.verdict(_host(secure_boot=True, mok=_mok(state="enrolled")), None, SETTINGS)}
    assert checks["secure boot"].status == "ok" and "MOK.der, which is enrolled" in checks["secure boot"].detail


def test_secure_boot_with_the_enrollment_pending_asks_for_the_console() -> None:
    host = _host(secure_boot=True, mok=_mok(state="pending"))
    [check] = _failed(preflight.verdict(host, None, SETTINGS)).values()
    assert "waits to be enrolled" in check.detail and "Enroll MOK" in check.way_out


def test_secure_boot_without_a_key_says_how_to_make_one_per_distribution() -> None:
    ubuntu = _host(secure_boot=True, mok=_mok(state="missing", key_present=False))
    [check] = _failed(preflight.verdict(ubuntu, None, SETTINGS)).values()
    assert check.way_out.startswith("1) make the key: sudo update-secureboot-policy --new-key; 2) enroll it")
    debian = _host(
        secure_boot=True,
        os={"id": "debian", "version_id": "12", "pretty": "Debian GNU/Linux 12 (bookworm)"},
        mok=_mok(state="missing", key_present=False, key="/var/lib/dkms/mok.key", cert="/var/lib/dkms/mok.pub"),
    )
    [check] = _failed(preflight.verdict(debian, None, SETTINGS)).values()
    assert "codeSigning -keyout /var/lib/dkms/mok.key -outform DER -out /var/lib/dkms/mok.pub" in check.way_out
    assert "sudo mokutil --import /var/lib/dkms/mok.pub" in check.way_out


def test_an_enrolled_certificate_without_its_private_key_fails() -> None:
    host = _host(secure_boot=True, mok=_mok(state="enrolled", key_present=False))
    [check] = _failed(preflight.verdict(host, None, SETTINGS)).values()
    assert "MOK.priv is missing" in check.detail and "make the key" in check.way_out


def test_secure_boot_unknown_key_state_needs_mokutil() -> None:
    host = _host(secure_boot=True, secure_boot_source="the SecureBoot EFI variable", mok=_mok(state="unknown"))
    [check] = _failed(preflight.verdict(host, None, SETTINGS)).values()
    assert "apt-get install mokutil" in check.way_out


def test_deploy_stages_the_enrollment_when_set() -> None:
    staged = load_settings(
        {**profile_data(), "secure_boot_mok_enrollment": "deploy_stages", "secure_boot_mok_password": "one-time"}
    )
    checks = {c.name: c for c in preflight.verdict(_host(secure_boot=True), None, staged)}
    assert checks["secure boot"].status == "warn" and "stages the enrollment" in checks["secure boot"].way_out


def test_secure_boot_read_from_the_efi_variable_says_so() -> None:
    host = _host(secure_boot=False, secure_boot_source="the SecureBoot EFI variable")
    checks = {c.name: c for c in preflight.verdict(host, None, SETTINGS)}
    assert checks["secure boot"].detail == "disabled (the SecureBoot EFI variable)"


def test_bar1_from_lspci_stops_the_open_flavour_before_any_driver() -> None:
    small = _host(pci_bar1_mib={"0000:06:00.0": 256, "0000:07:00.0": 32768})
    open_flavor = load_settings({**profile_data(), "nvidia_driver_flavor": "open"})
    [check] = _failed(preflight.verdict(small, None, open_flavor)).values()
    assert check.name == "bar1" and "0000:06:00.0 256 MiB" in check.detail and "07:00.0" not in check.detail
    assert "nvidia_driver_flavor=proprietary" in check.way_out
    assert "bar1" not in {c.name for c in preflight.verdict(small, None, SETTINGS)}  # proprietary: no check
    roomy = {c.name: c.status for c in preflight.verdict(_host(), None, open_flavor)}
    assert roomy["bar1"] == "ok"
    assert "bar1" not in {c.name for c in preflight.verdict(small, _with(GPUS, TOPO), open_flavor)}  # nvidia-smi's turn


def test_a_hand_written_cuda_source_is_named() -> None:
    entry = {
        "file": "/etc/apt/sources.list.d/cuda.list",
        "entry": "deb https://x/compute/cuda/repos/ubuntu2404/x86_64/ /",
    }
    [check] = _failed(preflight.verdict(_host(cuda_sources=[entry]), None, SETTINGS)).values()
    assert check.name == "apt sources" and "/etc/apt/sources.list.d/cuda.list" in check.detail
    assert check.way_out.startswith("remove /etc/apt/sources.list.d/cuda.list")


def test_driver_vllm_rig_installed_may_move_to_a_new_pin() -> None:
    host = _host(packages={"nvidia-driver-cuda": "580.159.03-1"}, rig_driver="580.159.03")
    settings = load_settings({**profile_data(), "nvidia_driver_version": "580.159.04"})
    checks = {c.name: c for c in preflight.verdict(host, None, settings)}
    assert checks["driver"].status == "warn" and "planned upgrade to 580.159.04" in checks["driver"].way_out


def test_other_driver_is_kept_unless_settings_say_replace() -> None:
    host = _host(packages={"nvidia-driver-cuda": "550.54.15-1"})
    replace = load_settings({**profile_data(), "nvidia_driver_replace_existing": True})
    assert not preflight.has_failures(preflight.verdict(host, None, replace))


def test_one_gpu_missing_after_driver() -> None:
    gpus = {"rc": 0, "error": None, "problem": None, "driver_version": "580.159.03", "gpus": [_gpu(0)]}
    checks = preflight.verdict(_host(), _with(gpus, TOPO), SETTINGS)
    failed = _failed(checks)
    assert "gpus" in failed and "need 2" in failed["gpus"].detail
    assert not {"nvlink", "p2p"} & {c.name for c in checks}  # one cause, one line


def test_small_card_and_wrong_arch() -> None:
    gpus = {
        "rc": 0,
        "error": None,
        "problem": None,
        "driver_version": "580.159.03",
        "gpus": [_gpu(0), _gpu(1, memory_mib=11264, compute_cap=None, architecture="Ampere")],
    }
    failed = [c for c in preflight.verdict(_host(), _with(gpus, TOPO), SETTINGS) if c.status == "fail"]
    assert [c.detail for c in failed] == ["11264 MiB", "GPU architecture Ampere, not Turing (compute capability 7.5)"]
    # The default profile runs the upstream kind: the line names it, not "the fork" (issue 36).
    assert (
        failed[1].way_out
        == f"runtime_kind upstream (vLLM {SETTINGS.vllm_version}) is set up here for compute capability 7.5"
    )
    fork = load_settings({**profile_data(), "runtime_kind": "fork"})
    [wrong] = [
        c for c in preflight.verdict(_host(), _with(gpus, TOPO), fork) if c.detail.startswith("GPU architecture Ampere")
    ]
    assert wrong.way_out.startswith("runtime_kind fork (the SM75 fork, ") and "the fork targets" not in wrong.way_out


def test_small_bar1_fails_only_with_the_open_modules() -> None:
    gpus = {
        "rc": 0,
        "error": None,
        "problem": None,
        "driver_version": "580.159.03",
        "gpus": [_gpu(0, bar1_mib=256), _gpu(1, bar1_mib=256)],
    }
    open_flavor = load_settings({**profile_data(), "nvidia_driver_flavor": "open"})
    failed = [c for c in preflight.verdict(_host(), _with(gpus, TOPO), open_flavor) if c.status == "fail"]
    assert len(failed) == 2 and "proprietary" in failed[0].way_out and "BAR1 256 MiB" in failed[0].detail
    assert not preflight.has_failures(preflight.verdict(_host(), _with(gpus, TOPO), SETTINGS))  # proprietary


def test_no_bridge_is_a_warning_that_says_so() -> None:
    topo = {**TOPO, "topo": {"GPU0": {"GPU1": "PHB"}}, "p2p": {"GPU0": {"GPU1": "CNS"}}, "nvlink": {}}
    checks = {c.name: c for c in preflight.verdict(_host(), _with(GPUS, topo), SETTINGS)}
    assert checks["nvlink"].status == "warn" and "bridge" in checks["nvlink"].way_out
    assert checks["p2p"].status == "warn" and "CNS" in checks["p2p"].detail


def test_version_mismatch_means_reboot_not_failure() -> None:
    gpus = {"rc": 18, "error": "Failed to initialize NVML: Driver/library version mismatch", "gpus": []}
    checks = {c.name: c for c in preflight.verdict(_host(), _with(gpus, None), SETTINGS)}
    assert checks["nvidia-smi"].status == "warn" and "reboot" in checks["nvidia-smi"].way_out


def test_nouveau_and_missing_headers_are_fixed_later_not_fatal() -> None:
    checks = preflight.verdict(_host(modules=["nouveau"], headers=False), None, SETTINGS)
    assert not preflight.has_failures(checks)
    assert {c.name: c.status for c in checks}["nouveau"] == "warn"


def test_table_and_json() -> None:
    checks = preflight.verdict(_host(secure_boot=True), None, SETTINGS)
    table = preflight.render_table("gpubox", checks)
    assert table.splitlines()[0] == "preflight verdict for gpubox: FAIL"
    assert any(line.strip().startswith("FAIL secure boot") for line in table.splitlines())
    doc = json.loads(preflight.render_json("gpubox", checks))
    assert doc["go"] is False and {"name", "status", "detail", "way_out"} <= set(doc["checks"][0])


def test_no_module_loaded_under_the_pinned_driver_is_the_driver_stages_to_explain() -> None:
    gpus = {
        "rc": 9,
        "error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        "gpus": [],
    }
    pinned = _host(packages={"nvidia-driver-cuda": "580.159.03-1"}, rig_driver="580.159.03")
    checks = {c.name: c for c in preflight.verdict(pinned, _with(gpus, None), SETTINGS)}
    assert checks["nvidia-smi"].status == "warn" and "reboots once" in checks["nvidia-smi"].way_out
    loaded = _host(packages={"nvidia-driver-cuda": "580.159.03-1"}, driver_loaded="580.159.03")
    assert _failed(preflight.verdict(loaded, _with(gpus, None), SETTINGS))["nvidia-smi"].status == "fail"


def test_an_archive_driver_is_kept_or_replaced_only_by_choice() -> None:
    from vllm_rig.stages.preflight.checks import check_existing_driver

    host = {
        "packages": {
            "nvidia-utils-580": "580.173.02-0ubuntu0.24.04.1",
            "linux-modules-nvidia-580-generic": "6.8.0-50.51+1",
        },
        "driver_loaded": "580.173.02",
        "rig_driver": None,
    }
    refuse = check_existing_driver(host, None, load_settings(profile_data()))
    assert refuse.status == "fail" and "nvidia_keep_archive_driver=true" in refuse.way_out
    assert "Canonical's signed modules" in refuse.detail
    keep = check_existing_driver(host, None, load_settings({**profile_data(), "nvidia_keep_archive_driver": True}))
    assert keep.status == "ok" and "kept as it is" in keep.detail
    replace = check_existing_driver(
        host, None, load_settings({**profile_data(), "nvidia_driver_replace_existing": True})
    )
    assert replace.status == "warn" and "replaced by NVIDIA's 580.159.03" in replace.way_out


def test_secure_boot_passes_a_kept_archive_driver_whose_modules_canonical_signed() -> None:
    from vllm_rig.stages.preflight.checks import check_secure_boot

    host = {
        "secure_boot": True,
        "secure_boot_source": "mokutil",
        "mok": {"state": "not_enrolled", "cert": "/var/lib/shim-signed/mok/MOK.der", "key_present": True},
        "packages": {"linux-modules-nvidia-580-generic": "6.8.0-50.51+1"},
    }
    kept = check_secure_boot(host, load_settings({**profile_data(), "nvidia_keep_archive_driver": True}))
    assert kept.status == "ok" and "Canonical-signed" in kept.detail
    # replacing it means DKMS-built modules again: the MOK question comes back
    replaced = check_secure_boot(host, load_settings({**profile_data(), "nvidia_driver_replace_existing": True}))
    assert replaced.status == "fail" and "MOK.der" in replaced.detail


# --- links, on real outputs (issue 15) ---------------------------------------------------------------------
FOUR = load_settings({**profile_data(), "gpu_count": 4})
FOUR_GPUS = {
    "rc": 0,
    "error": None,
    "problem": None,
    "driver_version": "580.159.03",
    "gpus": [_gpu(i) for i in range(4)],
}


def _links(checks: list[preflight.Check]) -> dict[str, preflight.Check]:
    return {c.name: c for c in checks if c.name in ("nvlink", "p2p")}


def test_links_cover_every_pair_of_the_gpus_in_use() -> None:
    """Five GPUs joined by NODE, P2P granted: with gpu_count 4 every pair of GPU0-GPU3 is named, not only
    GPU0-GPU1; GPU4 is not in use."""
    topo = _topology("NODE", count=5)
    links = _links(preflight.check_links(_with(FOUR_GPUS, topo), FOUR))
    pairs = ["GPU0-GPU1", "GPU0-GPU2", "GPU0-GPU3", "GPU1-GPU2", "GPU1-GPU3", "GPU2-GPU3"]
    assert links["nvlink"].detail == ", ".join(f"{p} connected by NODE" for p in pairs) + ", no NVLink"
    assert links["p2p"] == preflight.ok("p2p", f"driver grants P2P (OK) for {', '.join(pairs)}")
    two = _links(preflight.check_links(_with(GPUS, topo), SETTINGS))  # gpu_count 2: only the pair in use
    assert two["nvlink"].detail == "GPU0-GPU1 connected by NODE, no NVLink"


def test_nvlink_between_every_pair_is_ok() -> None:
    """Four GPUs, NV6 between all, P2P granted, no link speeds said."""
    topo = _topology("NV6")
    nvlink = _links(preflight.check_links(_with(FOUR_GPUS, topo), FOUR))["nvlink"]
    assert nvlink.status == "ok" and nvlink.detail == (
        "GPU0-GPU1 NV6, GPU0-GPU2 NV6, GPU0-GPU3 NV6, GPU1-GPU2 NV6, GPU1-GPU3 NV6, GPU2-GPU3 NV6; "
        "link speeds not reported"
    )
    assert _links(preflight.check_links(_with(GPUS, TOPO), SETTINGS))["nvlink"].detail == (
        "GPU0-GPU1 NV2; 2 link(s) per GPU up at 25.781 GB/s"
    )


def test_an_inactive_link_of_a_gpu_in_use_is_named() -> None:
    """Case 5: GPU 3's links 3 and 5 not up (as a real V100's were) on the four-GPU NV6 matrix."""
    topo = _topology("NV6", nvlink_down=["GPU3 link 3", "GPU3 link 5"])
    links = _links(preflight.check_links(_with(FOUR_GPUS, topo), FOUR))
    assert links["nvlink"].status == "warn" and links["nvlink"].detail.startswith("GPU3 link 3, GPU3 link 5 inactive")
    assert "reseat" in links["nvlink"].way_out
    # GPU 3 is not in use with gpu_count 2: its links say nothing of the rig's pair.
    assert _links(preflight.check_links(_with(GPUS, topo), SETTINGS))["nvlink"].status == "ok"


def test_all_links_inactive_names_the_bridge_as_down() -> None:
    """Case 2: GPU 2 has links and none is up, among four GPUs."""
    topo = _topology("NV6", nvlink_down=["GPU2 all links"])
    nvlink = _links(preflight.check_links(_with(FOUR_GPUS, topo), FOUR))["nvlink"]
    assert nvlink.status == "warn" and "GPU2: NVML says all links are inactive" in nvlink.detail
    assert "the NVLink bridge is down" in nvlink.detail and "seat the NVLink bridge" in nvlink.way_out


def test_a_pcie_pair_and_refused_p2p_are_warned_for_each_pair() -> None:
    """Two GPUs behind one host bridge (PHB), P2P refused: GPU not supported (GNS), as two RTX 5090 are."""
    topo = _topology("PHB", "GNS", count=2)
    links = _links(preflight.check_links(_with(GPUS, topo), SETTINGS))
    assert links["nvlink"].detail == "GPU0-GPU1 connected by PHB, no NVLink" and "bridge" in links["nvlink"].way_out
    assert (links["p2p"].status, links["p2p"].detail) == ("warn", "driver reports GPU0-GPU1 GNS")


def test_links_nvml_could_not_read_are_said_in_one_line() -> None:
    """Case 6: NVML failed a call (the reader's error line), so no half-read matrix is judged."""
    error = "NVML nvmlDeviceGetTopologyCommonAncestor: Unknown Error (return code 999)"
    checks = preflight.check_links(_with(GPUS, _topology("", error=error, topo={})), SETTINGS)
    assert [(c.name, c.status) for c in checks] == [("nvlink", "warn")]
    assert checks[0].detail == f"NVLink and P2P not read: {error}"


def test_the_driver_line_names_the_loaded_modules_flavour() -> None:
    """Case 3: h200/proc_driver_nvidia_version (open) and truenas-580/proc_driver_nvidia_version
    (proprietary), through the host fact."""
    for name, said in (
        ("h200/proc_driver_nvidia_version", "580.159.04 (the pinned version); loaded: the open module 580.159.04"),
        ("truenas-580/proc_driver_nvidia_version", "loaded: the proprietary module 580.173.02"),
    ):
        state = HostState().process(["@@kernel", "6.8.0-1-generic", "@@driver_loaded", *_real(name)])
        host = _host(driver_loaded=state["driver_loaded"], driver_flavour=state["driver_flavour"])
        pin = load_settings({**profile_data(), "nvidia_driver_version": "580.159.04"})
        assert said in preflight.check_existing_driver(host, None, pin).detail


def test_the_mismatch_line_names_both_versions() -> None:
    """Case 4: truenas-580/nvidia-smi_plain (NVML library 580.178) beside its loaded module (580.173.02)."""
    gpus = NvidiaGpus().process(record((OUTPUTS / "truenas-580" / "nvidia-smi_plain.out").read_text(), 18))
    state = HostState().process(
        ["@@kernel", "6.8.0-1-generic", "@@driver_loaded", *_real("truenas-580/proc_driver_nvidia_version")]
    )
    [check] = preflight.check_driver_gpus(gpus, SETTINGS, state["driver_loaded"])
    assert check.status == "warn" and "reboot" in check.way_out
    assert check.detail == (
        "Failed to initialize NVML: Driver/library version mismatch (NVML library 580.178, loaded module 580.173.02)"
    )


def test_not_available_cells_never_crash_a_gpu_line() -> None:
    """Case 7: [N/A] where a riser hides the link width and a GB10 its memory (gb10/nvidia-smi_query)."""
    checks = preflight.check_driver_gpus({**GPUS, "gpus": [_gpu(0, pcie_width=None), _gpu(1)]}, SETTINGS)
    assert {c.name: c.detail for c in checks}["gpu0"] == "22528 MiB, CC 7.5, PCIe width not reported"
    checks = preflight.check_driver_gpus({**GPUS, "gpus": [_gpu(0, memory_mib=None), _gpu(1)]}, SETTINGS)
    assert {c.name: (c.status, c.detail) for c in checks}["gpu0"] == (
        "fail",
        "memory not reported by nvidia-smi (N/A)",
    )


@pytest.mark.parametrize(
    ("name", "flavor", "status"),
    [
        ("h200/proc_driver_nvidia_version", "proprietary", "fail"),  # the open module, settings pin proprietary
        ("h200/proc_driver_nvidia_version", "open", "ok"),
        ("truenas-580/proc_driver_nvidia_version", "proprietary", "ok"),
        ("truenas-580/proc_driver_nvidia_version", "open", "fail"),
    ],
)
def test_the_loaded_flavour_is_compared_with_the_setting(name: str, flavor: str, status: str) -> None:
    """Real /proc/driver/nvidia/version lines (an H200's open module, a TrueNAS box's proprietary one) against
    nvidia_driver_flavor: the other flavour's module fails preflight with both ways out."""
    state = HostState().process(["@@kernel", "6.8.0-1-generic", "@@driver_loaded", *_real(name)])
    host = _host(driver_loaded=state["driver_loaded"], driver_flavour=state["driver_flavour"])
    [check] = preflight.check_driver_flavour(host, load_settings({**profile_data(), "nvidia_driver_flavor": flavor}))
    assert check.status == status
    if status == "fail":
        assert f"settings pin nvidia_driver_flavor={flavor}" in check.detail
        assert f"set nvidia_driver_flavor={state['driver_flavour']}" in check.way_out
    assert check in preflight.verdict(host, None, load_settings({**profile_data(), "nvidia_driver_flavor": flavor}))


def test_no_loaded_module_has_no_flavour_line() -> None:
    assert preflight.check_driver_flavour(_host(), SETTINGS) == []


def test_secure_boot_that_nothing_reports_is_a_warning_with_a_way_out() -> None:
    """The H200 box's real `mokutil --sb-state` (not installed: h200/mokutil_sb.err) and an EFI variable the
    fact's command could not read ("novar"): unknown is not "off"."""
    state = facts.secure_boot_state(_real_err("h200/mokutil_sb"), ["novar"])
    assert state == {"secure_boot": None, "secure_boot_source": None}
    checks = {c.name: c for c in preflight.verdict(_host(**state), None, SETTINGS)}
    check = checks["secure boot"]
    assert check.status == "warn" and check.detail.startswith("not reported")
    assert "apt-get install mokutil" in check.way_out
    assert not preflight.has_failures([check])


# --- issue 36: shim's validation off, GPUs without NVLink ----------------------------------------------------
def test_shim_validation_disabled_needs_no_mok() -> None:
    """mokutil-shim/mokutil_sb.out: "SecureBoot enabled" then "SecureBoot validation is disabled in shim"; the
    kernel enforces no signature, so preflight passes without asking for an enrollment and the driver stage
    stages none."""
    from vllm_rig.stages.driver.mok import needs_staging
    from vllm_rig.stages.preflight.facts import secure_boot_state

    state = secure_boot_state(_real("mokutil-shim/mokutil_sb"), [])
    assert state == {
        "secure_boot": False,
        "secure_boot_source": "mokutil --sb-state: SecureBoot validation is disabled in shim",
    }
    host = _host(**state, mok=_mok(state="not_enrolled"))
    check = {c.name: c for c in preflight.verdict(host, None, SETTINGS)}["secure boot"]
    assert check.status == "ok" and "validation is disabled" in check.detail and "no MOK enrollment" in check.detail
    assert not needs_staging(host)


def test_no_nvlink_answer_is_a_verdict_and_keeps_the_p2p_line() -> None:
    """GPUs without NVLink (NVML answers NOT_SUPPORTED for each link number, as on the real H100 machine,
    h100-nvml/): preflight says no NVLink and still reads the P2P grant."""
    topo = _topology("NODE", count=2, nvlink={0: [], 1: []})
    links = _links(preflight.check_links(_with(GPUS, topo), SETTINGS))
    assert links["nvlink"].status == "warn" and links["nvlink"].detail == "GPU0-GPU1 connected by NODE, no NVLink"
    assert links["p2p"].status == "ok"


@pytest.mark.parametrize(
    ("data", "free", "status", "line"),
    [
        # The default (the upstream kind's wheels) compiles nothing: 40 GB, not a compile's 110.
        ({}, 45.0, "ok", "45.0 GB free under /opt/vllm-rig"),
        ({}, 35.0, "fail", "35.0 GB free under /opt/vllm-rig, need 40 for the upstream wheels (~4) and the model "
                           "(~29)"),
        ({"runtime_kind": "fork"}, 45.0, "fail", "45.0 GB free under /opt/vllm-rig, need 110 for a compile (~80) and "
                                                 "the model (~29)"),
        ({"min_free_disk_gb": 50}, 45.0, "fail", "45.0 GB free under /opt/vllm-rig, need 50 for min_free_disk_gb"),
    ],
)  # fmt: skip
def test_the_disk_floor_follows_the_runtime_kind(data: dict, free: float, status: str, line: str) -> None:
    s = load_settings({**profile_data(), **data})
    check = preflight.check_disk(_host(disk_free_gb=free), s)
    assert (check.status, check.detail) == (status, line)
