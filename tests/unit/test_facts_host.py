"""The batched host fact: parsers on real outputs (H200 box), and the command run for real here."""

from __future__ import annotations

import subprocess
from pathlib import Path

from vllm_rig.stages.preflight import facts

H200 = Path(__file__).parent / "fixtures" / "tool_outputs" / "h200"


def _lines(name: str) -> list[str]:
    return (H200 / f"{name}.out").read_text().splitlines()


def test_os_release_real() -> None:
    assert facts.parse_os_release(_lines("os_release")) == {
        "id": "ubuntu",
        "version_id": "24.04",
        "pretty": "Ubuntu 24.04.3 LTS",
    }


def test_meminfo_real() -> None:
    assert facts.parse_meminfo_gb(_lines("meminfo")) == 125.9


def test_loaded_modules_and_driver_real() -> None:
    assert facts.parse_modules(_lines("proc_modules_nvidia")) == ["nvidia", "nvidia_uvm"]
    # The loaded module's version and flavour, as the batched fact returns them (h200: the open module).
    state = facts.HostState().process(
        ["@@kernel", "6.8.0-1-generic", "@@driver_loaded", *_lines("proc_driver_nvidia_version")]
    )
    assert (state["driver_loaded"], state["driver_flavour"]) == ("580.159.04", "open")
    state = facts.HostState().process(
        ["@@kernel", "6.8.0-1-generic", "@@driver_loaded"]
    )  # no module loaded: the file is not there
    assert (state["driver_loaded"], state["driver_flavour"]) == (None, None)


def test_packages_real_keeps_installed_only() -> None:
    packages = facts.parse_packages(_lines("dpkg_nvidia"))
    assert packages["cuda-nvcc-13-0"] == "13.0.88-1"
    assert "cuda-cub-13-0" not in packages  # "un": known to dpkg, not installed


def test_missing_tools_are_data() -> None:
    missing = (H200 / "lspci_nvidia.err").read_text().splitlines()
    assert facts.parse_lspci([*missing, "rc=127"]) == {"available": False, "devices": []}
    assert facts.parse_secure_boot((H200 / "mokutil_sb.err").read_text().splitlines()) is None


def test_lspci_two_turing_gpus_and_their_audio() -> None:
    lines = [
        '0000:06:00.0 "0300" "10de" "1e07" -ra1 "1458" "37a9"',
        '0000:06:00.1 "0403" "10de" "10f7" -ra1 "1458" "37a9"',
        '0000:07:00.0 "0300" "10de" "1e04" -ra1 "10de" "12ae"',
    ]
    devices = facts.parse_lspci(lines)["devices"]
    assert [d["device_id"] for d in devices] == ["1e07", "1e04"]


def test_secure_boot_states() -> None:
    assert facts.parse_secure_boot(["SecureBoot enabled"]) is True
    assert facts.parse_secure_boot(["SecureBoot disabled"]) is False
    assert facts.parse_secure_boot(["EFI variables are not supported on this system"]) is None


def test_command_runs_for_real_on_this_machine(tmp_path: Path) -> None:
    command = facts.HostState().command(path=str(tmp_path / "not" / "yet" / "there"))
    run = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    state = facts.HostState().process(run.stdout.splitlines())
    assert state["os"]["id"] in ("debian", "ubuntu") and state["kernel"] and state["cpus"] >= 1
    assert state["ram_gb"] > 0 and state["disk_free_gb"] > 0
    assert len(state["boot_id"]) == 36


def test_secure_boot_falls_back_to_the_efi_variable() -> None:
    no_mokutil = ["sh: 1: mokutil: not found", "rc=127"]
    assert facts.secure_boot_state(no_mokutil, ["   6   0   0   0   1"]) == {
        "secure_boot": True,
        "secure_boot_source": "the SecureBoot EFI variable",
    }
    assert facts.secure_boot_state(no_mokutil, ["   6   0   0   0   0"])["secure_boot"] is False
    assert facts.secure_boot_state(no_mokutil, ["noefi"]) == {
        "secure_boot": False,
        "secure_boot_source": "no EFI: legacy boot",
    }
    assert facts.secure_boot_state(no_mokutil, ["novar"])["secure_boot"] is None
    assert facts.secure_boot_state(["SecureBoot enabled"], ["noefi"])["secure_boot"] is True  # mokutil first


def test_mok_test_key_answers() -> None:
    head = ["key=/var/lib/shim-signed/mok/MOK.priv", "cert=/var/lib/shim-signed/mok/MOK.der", "key_present"]
    cert = "/var/lib/shim-signed/mok/MOK.der"
    assert facts.parse_mok([*head, f"{cert} is already enrolled", "rc=1"])["state"] == "enrolled"
    assert facts.parse_mok([*head, f"{cert} is already in db", "rc=1"])["state"] == "enrolled"
    assert facts.parse_mok([*head, f"{cert} is already in the enrollment request", "rc=1"])["state"] == "pending"
    not_enrolled = facts.parse_mok([*head, f"{cert} is not enrolled", "rc=0"])
    assert not_enrolled == {
        "key": "/var/lib/shim-signed/mok/MOK.priv",
        "cert": cert,
        "key_present": True,
        "state": "not_enrolled",
        "detail": f"{cert} is not enrolled",
    }
    missing = facts.parse_mok(["key=/var/lib/dkms/mok.key", "cert=/var/lib/dkms/mok.pub", "cert_missing"])
    assert (missing["state"], missing["key_present"]) == ("missing", False)
    assert facts.parse_mok([*head, "sh: 1: mokutil: not found", "rc=127"])["state"] == "unknown"
    no_tool = facts.parse_mok(["key=/var/lib/dkms/mok.key", "cert=/var/lib/dkms/mok.pub", "no_mokutil", "cert_missing"])
    assert (no_tool["state"], no_tool["detail"]) == ("unknown", "mokutil is not installed")


def test_bar1_from_lspci_region_lines() -> None:
    # Region lines as pciutils prints them (GT710 on linux-arm-kernel, 2019-05-17); TU102 headers.
    lines = [
        "0000:06:00.0 VGA compatible controller: NVIDIA Corporation TU102 [GeForce RTX 2080 Ti Rev. A] (rev a1)",
        "\tRegion 0: Memory at f6000000 (32-bit, non-prefetchable) [size=16M]",
        "\tRegion 1: Memory at c0000000 (64-bit, prefetchable) [size=256M]",
        "\tRegion 3: Memory at d0000000 (64-bit, prefetchable) [size=32M]",
        "0000:06:00.1 Audio device: NVIDIA Corporation TU102 High Definition Audio Controller (rev a1)",
        "\tRegion 0: Memory at f7080000 (32-bit, non-prefetchable) [size=16K]",
        "0000:07:00.0 3D controller: NVIDIA Corporation TU102 (rev a1)",
        "\tRegion 0: Memory at f4000000 (32-bit, non-prefetchable) [size=16M]",
        "\tRegion 1: Memory at 38000000000 (64-bit, prefetchable) [size=32G]",
    ]
    assert facts.parse_lspci_bar1(lines) == {"0000:06:00.0": 256, "0000:07:00.0": 32768}
    assert facts.parse_lspci_bar1(["sh: 1: lspci: not found"]) is None


def test_bar1_of_a_64_bit_bar0_card_is_region_2_real_h200() -> None:
    """A real `lspci -vv` (an H200): BAR0 is 64-bit, so the aperture is Region 2, 256G (nvidia-smi's BAR1)."""
    lines = (H200 / "lspci_vv_nvidia.out").read_text().splitlines()
    assert facts.parse_lspci_bar1(lines) == {"00:06.0": 256 * 1024}


def test_cuda_sources_leave_out_the_keyrings_own_file() -> None:
    lines = [
        "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list:deb [signed-by=/usr/share/keyrings/cuda-archive-"
        "keyring.gpg] https://repo.example/compute/cuda/repos/ubuntu2404/x86_64/ /",
        "/etc/apt/sources.list.d/cuda.list:deb https://repo.example/compute/cuda/repos/ubuntu2404/x86_64/ /",
    ]
    assert [s["file"] for s in facts.parse_cuda_sources(lines)] == ["/etc/apt/sources.list.d/cuda.list"]


def test_lspci_apostrophes_are_text_not_quoting() -> None:
    """Real lspci 3.9.0 output (fixtures/tool_outputs/pciutils-3.9): names carry apostrophes inside lspci's
    quotes, and its usage text (as 2>&1 would bring it) outside them; neither stops the host."""
    real = H200.parent / "pciutils-3.9"
    named = (real / "lspci_D_mm.out").read_text().splitlines()
    assert "SB300 AC'97 Audio Controller" in named[0]
    assert facts.parse_lspci(named)["devices"] == []  # names, not the numeric classes the deploy asks for
    numeric = (real / "lspci_D_mm_n.out").read_text().splitlines()
    usage = (real / "lspci_bad_option.out").read_text().splitlines()
    assert any("ID's" in line for line in usage)
    want = [{"slot": "0000:06:00.0", "class": "0300", "device_id": "1e07"}]
    assert facts.parse_lspci(numeric)["devices"] == want
    assert facts.parse_lspci([*usage, *numeric, "rc=1"])["devices"] == want
    # lspci's escaping (print_shell_escaped): a backslash before '"' and '\' inside a quoted field.
    assert facts._lspci_fields('0000:06:00.0 "0300" "a \\"b\\" c\'s" -ra1') == [
        "0000:06:00.0",
        "0300",
        'a "b" c\'s',
        "-ra1",
    ]
