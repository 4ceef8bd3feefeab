"""The NVIDIA repo fixture: the signed repos, the debs, and the stand-in tools run against a scratch root.

The stand-ins are run from the built debs (unpacked with dpkg-deb into a scratch directory that stands
for "/", via NVIDIA_STANDIN_ROOT), so these tests exercise what a machine gets. Formats are checked
against real captures from a driver-580 machine (tests/unit/fixtures/tool_outputs/h200/).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.fixtures import nvidia_repo
from tests.sandbox.fixtures.nvidia_repo import aptrepo, catalog, nvml_lib
from tests.sandbox.fixtures.nvidia_repo.standin import kmod_elf
from vllm_rig.host import nvml

CAPTURES = Path(__file__).parents[1] / "unit" / "fixtures" / "tool_outputs" / "h200"
OLD, NEW = catalog.DRIVER_VERSIONS
KERNEL = os.uname().release
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def capture(name: str) -> str:
    return (CAPTURES / f"{name}.out").read_text()


@pytest.fixture(scope="module")
def repo() -> Path:
    nvidia_repo.build()
    return nvidia_repo.repo_dir("debian12")


def deb(repo: Path, name: str, version: str = "") -> Path:
    """A built deb by name (and version prefix), from the repo or, for the machine's own, beside it."""
    matches = sorted(repo.glob(f"{name}_{version}*.deb")) or sorted(
        nvidia_repo.MACHINE_DIR.glob(f"{name}_{version}*.deb")
    )
    assert matches, f"{name} {version} not in {repo}"
    return matches[0]


def control(path: Path) -> dict[str, str]:
    text = subprocess.run(["dpkg-deb", "-f", str(path)], check=True, capture_output=True, text=True).stdout
    return dict(re.findall(r"^([\w-]+): (.*)$", text, re.M))


def packages_index(repo: Path) -> list[dict[str, str]]:
    stanzas = (repo / "Packages").read_text().strip().split("\n\n")
    return [dict(re.findall(r"^([\w-]+): (.*)$", s, re.M)) for s in stanzas]


# ---- a scratch machine root ------------------------------------------------------------------------


class Machine:
    """A directory standing for "/" of a machine, with debs unpacked into it and a settable boot id."""

    def __init__(self, root: Path, repo: Path) -> None:
        self.root, self.repo = root, repo
        self.reboot()

    def unpack(self, name: str, version: str = "") -> None:
        subprocess.run(["dpkg-deb", "-x", str(deb(self.repo, name, version)), str(self.root)], check=True)

    def reboot(self) -> None:
        boot_id = self.root / "proc/sys/kernel/random/boot_id"
        boot_id.parent.mkdir(parents=True, exist_ok=True)
        boot_id.write_text(f"{time.time_ns():x}\n")

    def run(self, *cmd: str, user: list[str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NVIDIA_STANDIN_ROOT": str(self.root)}
        tool = str(self.root / cmd[0].lstrip("/"))
        return subprocess.run(
            [*(user or []), tool, *cmd[1:]], env=env, capture_output=True, text=True, input=stdin, timeout=30
        )

    def smi(self, *args: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("/usr/bin/nvidia-smi", *args, user=user)

    def nvml(self) -> dict:
        """The product's NVML reader run here against the installed libnvidia-ml stand-in (nvml.Links)."""
        env = {**os.environ, "NVIDIA_STANDIN_ROOT": str(self.root), "LD_LIBRARY_PATH": str(self.file(nvml_lib.LIB_DIR))}
        code = "import dataclasses, json; from vllm_rig.host import nvml; "
        code += "print(json.dumps(dataclasses.asdict(nvml.read_links())))"
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30, check=True
        )
        return json.loads(run.stdout)

    def dkms(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("/usr/sbin/dkms", *args)

    def knobs(self, **knobs: object) -> None:
        nvidia_repo.set_knobs(self.root, **knobs)

    def state(self) -> dict:
        return json.loads(nvidia_repo.state_path(self.root).read_text())

    def file(self, path: str) -> Path:
        return self.root / path.lstrip("/")


@pytest.fixture
def machine(repo: Path) -> Iterator[Machine]:
    """Driver 580.159.03 (open modules) unpacked and built for the running kernel, as after an install."""
    root = Path(tempfile.mkdtemp(prefix="nvidia-machine-"))
    root.chmod(0o755)  # an unprivileged nvidia-smi must reach the files too
    try:
        m = Machine(root, repo)
        for name in ("nvidia-smi", "libnvidia-ml1", "nvidia-kernel-open-dkms", "nvidia-persistenced"):
            m.unpack(name, OLD)
        m.unpack("dkms")
        m.unpack(f"linux-headers-{KERNEL}")
        m.unpack("mokutil")  # a machine deb, not in the repo
        assert m.dkms("install", "-m", "nvidia", "-v", OLD).returncode == 0
        yield m
    finally:
        shutil.rmtree(root)


# ---- the repository --------------------------------------------------------------------------------


def test_release_is_signed_by_the_key_the_keyring_deb_installs(repo: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(deb(repo, "cuda-keyring")), str(tmp_path)], check=True)
    keyring = tmp_path / catalog.KEYRING.lstrip("/")
    aptrepo.verify(repo, keyring)
    tampered = tmp_path / "tampered"
    shutil.copytree(repo, tampered, ignore=shutil.ignore_patterns("*.deb"))
    (tampered / "Release").write_text((tampered / "Release").read_text().replace("NVIDIA CUDA", "Evil"))
    with pytest.raises(subprocess.CalledProcessError):
        aptrepo.verify(tampered, keyring)


def test_keyring_deb_points_apt_at_the_sandbox_repo(repo: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(deb(repo, "cuda-keyring", "1.1-1")), str(tmp_path)], check=True)
    listing = (tmp_path / "etc/apt/sources.list.d/cuda-debian12-x86_64.list").read_text()
    assert listing == f"deb [signed-by={catalog.KEYRING}] {nvidia_repo.repo_url('debian12')} /\n"
    assert not (tmp_path / "etc/apt/preferences.d").exists()  # the Debian keyring has no pin file
    ubuntu = nvidia_repo.repo_dir("ubuntu2404")
    subprocess.run(["dpkg-deb", "-x", str(deb(ubuntu, "cuda-keyring")), str(tmp_path / "u")], check=True)
    assert "Pin: release l=NVIDIA CUDA" in (tmp_path / "u/etc/apt/preferences.d/cuda-repository-pin-600").read_text()
    assert (repo / aptrepo.PUBKEY_NAME).read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_index_holds_both_driver_versions_with_realistic_relations(repo: Path) -> None:
    index = packages_index(repo)
    by = {(p["Package"], p["Version"]): p for p in index}
    for name in (
        "nvidia-driver-cuda",
        "nvidia-kernel-dkms",
        "nvidia-kernel-open-dkms",
        "nvidia-open",
        "cuda-drivers",
        "libcuda1",
        "nvidia-smi",
        "nvidia-persistenced",
        f"nvidia-driver-pinning-{OLD}",
    ):
        assert (name, f"{OLD}-1") in by and (name.replace(OLD, NEW), f"{NEW}-1") in by, name
    cuda = by[("nvidia-driver-cuda", f"{OLD}-1")]["Depends"]
    assert f"nvidia-smi (= {OLD}-1)" in cuda and f"libcuda1 (= {OLD}-1)" in cuda
    assert f"nvidia-kernel-open-dkms (>= {OLD})" in by[("nvidia-open", f"{OLD}-1")]["Depends"]
    assert "dkms (>= 3.1.8)" in by[("nvidia-kernel-open-dkms", f"{OLD}-1")]["Depends"]
    assert by[("nvidia-kernel-open-dkms", f"{OLD}-1")]["Conflicts"] == "nvidia-kernel-dkms"
    pin = by[("nvidia-driver-pinning-580", "580-5")]
    assert pin["Provides"] == pin["Conflicts"] == pin["Replaces"] == "nvidia-driver-pinning"
    assert by[("cuda-toolkit-12-9", "12.9.1-1")] and by[("cuda-nvcc-12-9", "12.9.86-1")]
    assert by[(f"linux-headers-{KERNEL}", f"{catalog.kernel_base_version(KERNEL)}-1")]
    for stanza in index:
        assert (repo / stanza["Filename"]).is_file()


def test_ubuntu_repo_uses_ubuntu_names(repo: Path) -> None:
    names = {p["Package"] for p in packages_index(nvidia_repo.repo_dir("ubuntu2404"))}
    assert {
        "nvidia-driver-580-open",
        "nvidia-dkms-580-open",
        "nvidia-utils-580",
        "nvidia-headless-580",
        "libnvidia-compute-580",
        "cuda-drivers-580",
        "nvidia-open-580",
        "linux-headers-generic",
        "linux-headers-generic-hwe-24.04",  # noble's HWE track beside the GA one
        "linux-image-generic-hwe-24.04",
    } <= names
    versions = {p["Version"] for p in packages_index(nvidia_repo.repo_dir("ubuntu2404"))}
    assert f"{OLD}-1ubuntu1" in versions and "1:3.4.0-2ubuntu1" in versions


def test_every_deb_is_well_formed(repo: Path, tmp_path: Path) -> None:
    debs = sorted(repo.glob("*.deb")) + nvidia_repo.machine_debs()
    for path in debs:
        fields = control(path)
        assert path.name == f"{fields['Package']}_{fields['Version'].split(':')[-1]}_{fields['Architecture']}.deb"
        assert fields["Maintainer"] and fields["Description"]
        info = subprocess.run(["dpkg-deb", "--info", str(path)], check=True, capture_output=True, text=True).stdout
        for script in ("postinst", "prerm", "postrm"):
            if re.search(rf"^\s+\d+ bytes,\s+\d+ lines\s+\*\s+{script}\s", info, re.M):
                out = tmp_path / path.stem
                subprocess.run(["dpkg-deb", "-e", str(path), str(out)], check=True)
                subprocess.run(["sh", "-n", str(out / script)], check=True)
                assert os.access(out / script, os.X_OK)
        listing = subprocess.run(["dpkg-deb", "-c", str(path)], check=True, capture_output=True, text=True).stdout
        assert all(" root/root " in line for line in listing.splitlines()), path.name


def test_pinning_packages_pin_branch_or_exact_version(repo: Path, tmp_path: Path) -> None:
    for name, pin in (("nvidia-driver-pinning-580", "580.*"), (f"nvidia-driver-pinning-{OLD}", f"{OLD}-1")):
        out = tmp_path / name
        subprocess.run(["dpkg-deb", "-x", str(deb(repo, name)), str(out)], check=True)
        text = (out / "etc/apt/preferences.d/nvidia-driver-pin").read_text()
        assert f"Pin: version {pin}\nPin-Priority: 1000\n" in text
        pinned = re.search(r"^Package: (.*)$", text, re.M).group(1).split()
        assert {
            "nvidia-driver-cuda",
            "nvidia-kernel-open-dkms",
            "libcuda1",
            "nvidia-smi",
            "cuda-drivers",
        } <= set(pinned)


def test_cuda_toolkit_files(repo: Path, tmp_path: Path) -> None:
    for name in (
        "cuda-nvcc-12-9",
        "cuda-cudart-dev-12-9",
        "cuda-culibos-dev-12-9",
        "cuda-driver-dev-12-9",
        "cuda-cudart-12-9",
        "cuda-toolkit-12-9-config-common",
    ):
        subprocess.run(["dpkg-deb", "-x", str(deb(repo, name)), str(tmp_path)], check=True)
    top = tmp_path / "usr/local/cuda-12.9"
    nvcc = subprocess.run([str(top / "bin/nvcc"), "--version"], capture_output=True, text=True)
    assert nvcc.returncode == 0
    assert nvcc.stdout == (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
        "Built on Tue_May_27_02:21:03_PDT_2025\nCuda compilation tools, release 12.9, V12.9.86\n"
        "Build cuda_12.9.r12.9/compiler.36037853_0\n"
    )
    # The real tool's wording for no input, taken from a real nvcc's output.
    assert subprocess.run([str(top / "bin/nvcc")], capture_output=True, text=True).stdout == (
        "nvcc fatal   : No input files specified; use option --help for more information\n"
    )
    assert subprocess.run([str(top / "bin/nvcc"), "-c", "x.cu"], capture_output=True).returncode == 1
    for lib in ("libcudadevrt.a", "libcudart_static.a", "libculibos.a"):
        members = subprocess.run(["ar", "t", str(top / "lib64" / lib)], check=True, capture_output=True, text=True)
        assert members.stdout.strip().endswith(".o")
    assert "#define CUDA_VERSION 12090" in (top / "include/cuda.h").read_text()
    assert json.loads((top / "version.json").read_text())["cuda"]["version"] == "12.9.1"
    subprocess.run(
        ["dpkg-deb", "-e", str(deb(repo, "cuda-toolkit-12-9-config-common")), str(tmp_path / "cc")],
        check=True,
    )
    postinst = (tmp_path / "cc/postinst").read_text()
    assert "update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-12.9 129" in postinst


def test_headers_package_provides_the_build_link(repo: Path) -> None:
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb(repo, f"linux-headers-{KERNEL}"))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert f"./lib/modules/{KERNEL}/build -> /usr/src/linux-headers-{KERNEL}" in listing
    assert control(deb(repo, "linux-headers-amd64"))["Depends"].startswith(f"linux-headers-{KERNEL} (=")


# ---- the stand-in kernel module ----------------------------------------------------------------------


def test_dkms_builds_installs_and_reports(machine: Machine) -> None:
    assert machine.dkms("status").stdout == f"nvidia/{OLD}, {KERNEL}, x86_64: installed\n"
    ko = machine.file(f"/lib/modules/{KERNEL}/updates/dkms/nvidia.ko").read_bytes()
    assert kmod_elf.read_modinfo(ko)["version"] == OLD
    assert kmod_elf.signature_key_id(ko) == hashlib.sha1(machine.file("/var/lib/dkms/mok.pub").read_bytes()).hexdigest()
    removed = machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    assert removed.returncode == 0 and "completely from the DKMS tree" in removed.stdout
    assert machine.dkms("status").stdout == ""
    assert not machine.file(f"/lib/modules/{KERNEL}/updates").exists()


def test_dkms_needs_headers_and_can_be_made_to_fail(machine: Machine) -> None:
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    machine.file(f"/lib/modules/{KERNEL}/build").unlink()
    failed = machine.dkms("install", "-m", "nvidia", "-v", OLD)
    assert failed.returncode != 0 and "Your kernel headers for kernel" in failed.stderr
    machine.unpack(f"linux-headers-{KERNEL}")
    machine.knobs(dkms_build_fails=[OLD])
    failed = machine.dkms("install", "-m", "nvidia", "-v", OLD)
    assert failed.returncode == 10 and "Bad return status for module build" in failed.stderr


# ---- nvidia-smi ----------------------------------------------------------------------------------------


def test_no_module_means_no_driver(repo: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="nvidia-machine-"))
    try:
        m = Machine(root, repo)
        m.unpack("nvidia-smi", OLD)
        out = m.smi()
        assert out.returncode == 9
        assert out.stdout == (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n\n"
        )
    finally:
        shutil.rmtree(root)


def test_list_and_query_formats(machine: Machine) -> None:
    listed = machine.smi("-L").stdout.splitlines()
    assert len(listed) == 2
    assert re.fullmatch(r"GPU 1: NVIDIA GeForce RTX 2080 Ti \(UUID: GPU-[0-9a-f-]{36}\)", listed[1])
    fields = "index,name,memory.total,memory.used,compute_cap,driver_version,persistence_mode,power.limit"
    fields += ",pci.bus_id"
    csv = machine.smi(f"--query-gpu={fields}", "--format=csv").stdout.splitlines()
    assert csv[0] == (
        "index, name, memory.total [MiB], memory.used [MiB], compute_cap, driver_version, "
        "persistence_mode, power.limit [W], pci.bus_id"
    )
    gpu0 = f"0, NVIDIA GeForce RTX 2080 Ti, 22528 MiB, 1 MiB, 7.5, {OLD}, Disabled, 250.00 W, 00000000:01:00.0"
    assert csv[1] == gpu0
    bare = machine.smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "1").stdout
    assert bare == f"1, NVIDIA GeForce RTX 2080 Ti, 22528, 1, 7.5, {OLD}, Disabled, 250.00, 00000000:02:00.0\n"


def test_query_fields_of_the_real_capture_are_all_known(machine: Machine) -> None:
    header = capture("nvidia-smi_query").splitlines()[0]
    fields = ",".join(re.sub(r" \[.*\]$", "", f) for f in header.split(", "))
    out = machine.smi(f"--query-gpu={fields}", "--format=csv")
    assert out.returncode == 0 and out.stdout.splitlines()[0] == header


def test_errors_match_the_real_tool(machine: Machine) -> None:
    bad = machine.smi("--query-gpu=index,bogus.field", "--format=csv")
    assert (bad.returncode, bad.stdout) == (2, capture("nvidia-smi_query_badfield"))
    combo = machine.smi("-i", "97", "-L")
    assert (combo.returncode, combo.stdout) == (2, capture("nvidia-smi_bad_index"))
    assert machine.smi("-q", "-x", "-i", "7").returncode == 6
    assert machine.smi("-q").returncode == 2  # the text -q has no reader left: refused, not faked
    assert machine.smi("--bogus").returncode == 2


def test_q_x_is_the_xml_the_reader_reads(machine: Machine) -> None:
    """`-q -x`: the stand-in's XML (smi_xml.py, checked against NVIDIA's DTD in tests/unit/test_gpu_facts.py)
    read by the deploy's one reader; BAR1 follows its knob, -i picks a GPU."""
    from vllm_rig.host import gpu_facts

    facts = gpu_facts.parse(machine.smi("-q", "-x").stdout)
    assert [(g.index, g.architecture, g.compute_cap, g.bar1_mib) for g in facts.gpus] == [
        (0, "Turing", "7.5", 32768),
        (1, "Turing", "7.5", 32768),
    ]
    assert facts.driver_version == OLD
    machine.knobs(bar1_mib=256)
    [gpu] = gpu_facts.parse(machine.smi("-q", "-x", "-i", "1").stdout).gpus
    assert (gpu.bus_id, gpu.bar1_mib) == ("00000000:02:00.0", 256)


def test_plain_table_has_the_real_layout(machine: Machine) -> None:
    ours = machine.smi().stdout.splitlines()
    real = capture("nvidia-smi_plain").splitlines()
    assert len(ours[0]) == len(real[0]) and all(len(line) == 91 for line in ours[1:] if line)
    assert ours[2] == real[2].replace(NEW, OLD)
    assert ours[3:8] == real[3:8] and ours[-7:] == real[-7:]
    seps = [[i for i, c in enumerate(line) if c == "|"] for line in (ours[8], ours[9], ours[10])]
    assert seps == [[i for i, c in enumerate(line) if c == "|"] for line in (real[8], real[9], real[10])]
    assert ours[8] == "|   0  NVIDIA GeForce RTX 2080 Ti     Off |   00000000:01:00.0 Off |                  N/A |"
    assert ours[9] == "| 27%   34C    P8             18W /  250W |       1MiB /  22528MiB |      0%      Default |"


def test_nvml_links_with_the_bridge(machine: Machine) -> None:
    """The product's NVML reader (vllm_rig/host/nvml.py) against the libnvidia-ml stand-in the package
    installs: two links each way at the 2080 Ti's 25.781 GB/s, NV2 between the GPUs, P2P granted."""
    assert machine.smi("-L").returncode == 0  # the driver is brought up by nvidia-smi first, as the reader does
    links = machine.nvml()
    assert links["error"] is None and links["nvlink"] == {"0": [25.781, 25.781], "1": [25.781, 25.781]}
    assert links["topo"] == {"GPU0": {"GPU1": "NV2"}, "GPU1": {"GPU0": "NV2"}} and links["nvlink_down"] == []
    assert links["p2p"] == {"GPU0": {"GPU1": "OK"}, "GPU1": {"GPU0": "OK"}}


def test_without_the_bridge_links_are_down_and_p2p_refused(machine: Machine) -> None:
    machine.knobs(nvlink_bridge=False)
    machine.smi("-L")
    links = machine.nvml()
    assert links["topo"]["GPU0"]["GPU1"] == "PHB" and links["p2p"]["GPU0"]["GPU1"] == "CNS"
    assert links["nvlink"]["0"] == [None, None] and links["nvlink_down"] == ["GPU0 all links", "GPU1 all links"]
    machine.knobs(pcie_path="SYS", p2p_without_bridge="NS")
    machine.smi("-L")
    assert machine.nvml()["topo"]["GPU0"]["GPU1"] == "SYS" and machine.nvml()["p2p"]["GPU1"]["GPU0"] == "NS"


def test_nvml_says_what_nvidia_smi_says_when_the_driver_is_not_usable(machine: Machine) -> None:
    """One GPU gone: one GPU, its links down; no nvidia-smi call yet: no driver (nvmlInit_v2's
    NVML_ERROR_DRIVER_NOT_LOADED), one line."""
    machine.knobs(missing_gpus=[0])
    machine.smi("-L")
    links = machine.nvml()
    assert links["topo"] == {} and links["nvlink_down"] == ["GPU0 all links"]
    machine.file("/var/lib/nvidia-standin/nvml.txt").unlink()
    assert machine.nvml()["error"] == "NVML nvmlInit_v2: Driver Not Loaded (return code 9)"


def test_a_missing_gpu_leaves_one(machine: Machine) -> None:
    machine.knobs(missing_gpus=[0])
    assert machine.smi("-L").stdout.splitlines()[0].startswith("GPU 0: NVIDIA GeForce RTX 2080 Ti")
    assert len(machine.smi("-L").stdout.splitlines()) == 1
    assert "00000000:02:00.0" in machine.smi("--query-gpu=pci.bus_id", "--format=csv,noheader").stdout


def test_the_stand_in_exports_every_nvml_function_the_product_calls(machine: Machine) -> None:
    """A call the stand-in lacks must fail loudly: each of nvml.FUNCTIONS is a symbol of the installed library."""
    library = machine.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    assert set(nvml.FUNCTIONS) <= {line.split()[-1] for line in symbols.splitlines()}


def test_pcie_width_knob(machine: Machine) -> None:
    machine.knobs(pcie_width=4)
    out = machine.smi("--query-gpu=pcie.link.width.current,pcie.link.width.max", "--format=csv,noheader").stdout
    assert out == "4, 16\n4, 16\n"


def test_persistence_and_power_limit_persist_until_reboot(machine: Machine) -> None:
    pm = machine.smi("-pm", "1")
    assert pm.returncode == 0
    assert pm.stdout == (
        "Enabled persistence mode for GPU 00000000:01:00.0.\n"
        "Enabled persistence mode for GPU 00000000:02:00.0.\nAll done.\n"
    )
    assert "already Enabled" in machine.smi("-pm", "1", "-i", "0").stdout
    pl = machine.smi("-pl", "260", "-i", "1")
    assert pl.stdout == "Power limit for GPU 00000000:02:00.0 was set to 260.00 W from 250.00 W.\nAll done.\n"
    bad = machine.smi("-pl", "400")
    assert bad.returncode == 2
    assert bad.stdout == (
        "Provided power limit 400.00 W is not a valid power limit which should be between 100.00 W "
        "and 300.00 W for GPU 00000000:01:00.0\nTerminating early due to previous errors.\n"
    )
    q = "--query-gpu=persistence_mode,power.limit,power.default_limit,power.min_limit,power.max_limit"
    assert machine.smi(q, "--format=csv,noheader,nounits").stdout == (
        "Enabled, 250.00, 250.00, 100.00, 300.00\nEnabled, 260.00, 250.00, 100.00, 300.00\n"
    )
    machine.reboot()
    assert machine.smi(q, "--format=csv,noheader").stdout.count("Disabled, 250.00 W") == 2


def test_settings_need_root(machine: Machine) -> None:
    pm = machine.smi("-pm", "1", user=NOBODY)
    assert pm.returncode == 4
    assert pm.stdout.startswith("Unable to set persistence mode for GPU 00000000:01:00.0: Insufficient Permissions\n")
    assert machine.smi("-pl", "200", user=NOBODY).returncode == 4
    assert machine.smi("-L", user=NOBODY).returncode == 0
    assert machine.smi("--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Disabled\nDisabled\n"


def test_upgrade_without_reboot_is_a_version_mismatch(machine: Machine) -> None:
    assert machine.smi("-L").returncode == 0  # 580.159.03 is loaded in this boot
    # What apt does on upgrade: the old package's prerm removes its module, the new one's postinst builds.
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    for name in ("nvidia-smi", "nvidia-kernel-open-dkms"):
        machine.unpack(name, NEW)
    assert machine.dkms("install", "-m", "nvidia", "-v", NEW).returncode == 0
    out = machine.smi()
    assert (out.returncode, out.stdout) == (
        18,
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n",
    )
    assert machine.smi("-L").returncode == 18
    assert machine.file("/sys/module/nvidia/version").read_text() == f"{OLD}\n"
    machine.reboot()
    assert machine.smi("--query-gpu=driver_version", "--format=csv,noheader").stdout == f"{NEW}\n{NEW}\n"
    assert machine.file("/sys/module/nvidia/version").read_text() == f"{NEW}\n"


def test_module_views(machine: Machine) -> None:
    machine.smi("-L")
    version = machine.file("/proc/driver/nvidia/version").read_text()
    real = capture("proc_driver_nvidia_version")
    pattern = (
        r"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  \(.*@.*\)  .*\n"
        r"GCC version:  gcc version .* \n"
    )
    assert re.fullmatch(pattern.format(v=re.escape(OLD)), version)
    assert re.fullmatch(pattern.format(v=re.escape(NEW)), real)  # the pattern holds for the real file too
    assert machine.file("/sys/module/nvidia/version").read_text() == f"{OLD}\n"
    assert machine.file("/sys/module/nvidia_uvm/initstate").read_text() == "live\n"
    info = machine.file("/proc/driver/nvidia/gpus/0000:02:00.0/information").read_text()
    assert "Model: \t\t NVIDIA GeForce RTX 2080 Ti\n" in info and "Device Minor: \t 1\n" in info
    assert "nvidia 14299136 0 - Live" in machine.file("/proc/modules").read_text()


def test_nouveau_blocks_the_driver_until_blacklisted_and_rebooted(machine: Machine) -> None:
    assert machine.smi("-L").returncode == 0
    machine.knobs(nouveau=True)
    assert machine.smi("-L").returncode == 0  # the knob is hardware: it acts at the next boot
    machine.reboot()
    assert machine.smi("-L").returncode == 9
    assert machine.file("/sys/module/nouveau/initstate").read_text() == "live\n"
    assert "nouveau " in machine.file("/proc/modules").read_text()
    conf = machine.file("/etc/modprobe.d/blacklist-nouveau.conf")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("blacklist nouveau\noptions nouveau modeset=0\n")
    assert machine.smi("-L").returncode == 9  # still loaded until the next boot
    machine.reboot()
    assert machine.smi("-L").returncode == 0
    assert not machine.file("/sys/module/nouveau").exists()


def test_secure_boot_rejects_the_module_until_its_key_is_enrolled(machine: Machine) -> None:
    assert machine.run("/usr/bin/mokutil", "--sb-state").stdout == "SecureBoot disabled\n"
    machine.knobs(secure_boot=True)
    machine.reboot()
    assert machine.run("/usr/bin/mokutil", "--sb-state").stdout == "SecureBoot enabled\n"
    assert machine.smi("-L").returncode == 9
    mok = machine.file("/var/lib/dkms/mok.pub")
    imported = machine.run("/usr/bin/mokutil", "--import", str(mok), stdin="pw\npw\n")
    assert imported.returncode == 0
    assert "SHA1 Fingerprint" in machine.run("/usr/bin/mokutil", "--list-new").stdout
    machine.reboot()  # nobody at the console: MokManager times out, the request stays pending
    assert machine.smi("-L").returncode == 9
    assert "Loading of module with unavailable key is rejected" in machine.state()["kernel"]["log"]
    pending = machine.run("/usr/bin/mokutil", "--test-key", str(mok))
    assert (pending.returncode, pending.stdout) == (1, f"{mok} is already in the enrollment request\n")
    machine.knobs(mok_console_confirms=True)
    machine.reboot()
    assert machine.smi("-L").returncode == 0
    enrolled = machine.run("/usr/bin/mokutil", "--test-key", str(mok))
    assert (enrolled.returncode, enrolled.stdout) == (1, f"{mok} is already enrolled\n")  # mokutil's own codes
    assert machine.state()["kernel"]["log"] == []


def test_test_key_of_a_key_nobody_imported_exits_0(machine: Machine) -> None:
    mok = machine.file("/var/lib/dkms/mok.pub")
    out = machine.run("/usr/bin/mokutil", "--test-key", str(mok))
    assert (out.returncode, out.stdout) == (0, f"{mok} is not enrolled\n")


def test_dkms_signs_with_the_key_framework_conf_names(machine: Machine) -> None:
    conf = machine.file("/etc/dkms/framework.conf")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(catalog.UBUNTU_FRAMEWORK_CONF)
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    built = machine.dkms("install", "-m", "nvidia", "-v", OLD)
    assert "Signing key: /var/lib/shim-signed/mok/MOK.priv" in built.stdout
    assert "Public certificate (MOK): /var/lib/shim-signed/mok/MOK.der" in built.stdout
    der = machine.file("/var/lib/shim-signed/mok/MOK.der")
    ko = machine.file(f"/lib/modules/{KERNEL}/updates/dkms/nvidia.ko").read_bytes()
    assert kmod_elf.signature_key_id(ko) == hashlib.sha1(der.read_bytes()).hexdigest()


def test_ubuntu_dkms_ships_shim_signed_paths(repo: Path) -> None:
    ubuntu = nvidia_repo.repo_dir("ubuntu2404")
    [dkms] = sorted(ubuntu.glob("dkms_*.deb"))
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(dkms)], check=True, capture_output=True).stdout
    assert b'mok_signing_key="/var/lib/shim-signed/mok/MOK.priv"' in listing
    [debian_dkms] = sorted(repo.glob("dkms_*.deb"))
    contents = subprocess.run(["dpkg-deb", "-c", str(debian_dkms)], check=True, capture_output=True, text=True)
    assert "framework.conf" not in contents.stdout  # upstream's defaults: /var/lib/dkms/mok.key, mok.pub


def test_a_failed_build_leaves_its_make_log(machine: Machine) -> None:
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    machine.knobs(dkms_build_fails=[OLD])
    failed = machine.dkms("install", "-m", "nvidia", "-v", OLD)
    assert failed.returncode == 10
    log = machine.file(f"/var/lib/dkms/nvidia/{OLD}/build/make.log")
    assert "Error 1" in log.read_text()


def test_lspci_shows_both_cards_and_their_bar1(machine: Machine) -> None:
    machine.unpack("nvidia-standin-machine")
    mm = machine.run("/usr/bin/lspci", "-D", "-mm", "-n", "-d", "10de:").stdout.splitlines()
    assert mm[0] == '0000:01:00.0 "0300" "10de" "1e07" -ra1 "19da" "1503"' and len(mm) == 4
    assert (
        "Region 1: Memory at e0000000 (64-bit, prefetchable) [size=32G]"
        in machine.run("/usr/bin/lspci", "-D", "-vv", "-d", "10de:").stdout
    )
    machine.knobs(bar1_mib=256, missing_gpus=[1])
    vv = machine.run("/usr/bin/lspci", "-D", "-vv", "-d", "10de:").stdout
    assert "[size=256M]" in vv and "0000:02:00.0" not in vv


def test_efi_variable_follows_the_secure_boot_knob(machine: Machine) -> None:
    machine.unpack("nvidia-standin-machine")
    var = machine.file("/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
    machine.knobs(secure_boot=True)
    machine.reboot()
    machine.run("/usr/lib/nvidia-standin/gpu-boot")
    assert var.read_bytes() == b"\x06\x00\x00\x00\x01"  # 4 attribute bytes, then the value
    machine.knobs(secure_boot=False)
    machine.reboot()
    machine.run("/usr/lib/nvidia-standin/gpu-boot")
    assert var.read_bytes()[4:] == b"\x00"
    machine.knobs(efi=False)
    machine.reboot()
    machine.run("/usr/lib/nvidia-standin/gpu-boot")
    assert not machine.file("/sys/firmware/efi").exists()


def test_open_modules_drop_a_22gb_card_with_a_small_bar1(machine: Machine) -> None:
    machine.knobs(bar1_mib=256)
    machine.reboot()
    out = machine.smi("-L")
    assert (out.returncode, out.stdout) == (6, "No devices were found\n")
    assert machine.state()["kernel"]["log"][0] == (
        "NVRM: kbusIsStaticBar1Supported_TU102: BAR1 size 268435456 is not large enough to map FB size23622320128 "
        "to force static BAR1"
    )
    machine.dkms("remove", "-m", "nvidia", "-v", OLD, "--all")
    machine.unpack("nvidia-kernel-dkms", OLD)  # the proprietary flavour maps BAR1 dynamically
    machine.dkms("install", "-m", "nvidia", "-v", OLD)
    machine.reboot()
    assert len(machine.smi("-L").stdout.splitlines()) == 2
    assert "Kernel Module  " + OLD in machine.file("/proc/driver/nvidia/version").read_text()
    assert "<product_name>NVIDIA GeForce RTX 2080 Ti</product_name>" in machine.smi("-q", "-x").stdout


def test_persistence_daemon(machine: Machine) -> None:
    started = machine.run("/usr/bin/nvidia-persistenced", "--verbose")
    assert started.returncode == 0
    pid_file = machine.file("/run/nvidia-persistenced/nvidia-persistenced.pid")
    pid = int(pid_file.read_text())
    try:
        assert machine.smi("--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Enabled\nEnabled\n"
        machine.smi("-pm", "0", "-i", "0")
        assert machine.smi("-pm", "1", "-i", "0").stdout.startswith("Enabled persistence mode via daemon for GPU")
    finally:
        os.kill(pid, 15)
    for _ in range(100):
        if not pid_file.exists():
            break
        time.sleep(0.05)
    assert machine.smi("--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Disabled\nDisabled\n"


def test_persistence_daemon_fails_without_a_driver(machine: Machine) -> None:
    machine.knobs(nouveau=True)
    machine.reboot()
    failed = machine.run("/usr/bin/nvidia-persistenced")
    assert failed.returncode == 1 and "failed to initialize" in failed.stderr


def test_the_gpu_wait_names_a_desktop_on_the_stand_in(machine: Machine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graphics process (type G) shows in the XML's processes and in memory.used; the GPU wait names it, and
    allows it within a desktop's allowance, while a compute process holds its card."""
    from vllm_rig.host import gpu_facts, gpu_wait

    xorg = {"gpu": 1, "pid": 1248, "name": "/usr/lib/xorg/Xorg", "used_mib": 28, "type": "G"}
    worker = {
        "gpu": 0,
        "pid": 4242,
        "name": "/opt/venv/bin/python3 -m some.very.long.module.name.worker",
        "used_mib": 900,
    }
    machine.knobs(compute_apps=[xorg, worker])
    facts = gpu_facts.parse(machine.smi("-q", "-x").stdout)
    assert [[(p.pid, p.kind, p.used_mib) for p in g.processes] for g in facts.gpus] == [
        [(4242, "C", 900)],
        [(1248, "G", 28)],
    ]
    assert facts.gpus[0].memory_used_mib == 901  # memory.used counts the process
    monkeypatch.setattr(gpu_wait.gpu_facts, "read", lambda: facts)
    held = gpu_wait.survey([0, 1], 1024).held  # no allowance for a desktop: its graphics hold the card
    assert held[1] == (
        "GPU 1 (00000000:02:00.0) is held by pid 1248 /usr/lib/xorg/Xorg (graphics, 28 MiB): graphics 28 MiB,"
        " no desktop's graphics allowed (gpu_wait_graphics_max_mib)"
    )
    assert held[0].startswith("GPU 0 (00000000:01:00.0) is held by pid 4242 /opt/venv/bin/python3")
    seen = gpu_wait.survey([0, 1], 1024, 64)  # the default allowance: the desktop is named, the worker holds GPU 0
    assert len(seen.held) == 1 and seen.held[0].startswith("GPU 0 (00000000:01:00.0) is held by pid 4242 ")
    assert seen.desktop == ["GPU 1: Xorg 28 MiB (a desktop's graphics, allowed up to 64 MiB)"]
