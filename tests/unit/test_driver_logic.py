"""Driver-stage decisions that need no host: package sets, reboot reasons, keyring names, toolkit facts."""

from __future__ import annotations

from vllm_rig.core.packages import parse_packages
from vllm_rig.stages.cuda.facts import CudaToolkit
from vllm_rig.stages.driver.apt_pin import held_candidates, installed_at
from vllm_rig.stages.driver.facts import ModuleFailure
from vllm_rig.stages.driver.keyring import parse_deb_filename
from vllm_rig.stages.driver.mok import enrollment_problem, mok_password_stdin, needs_staging
from vllm_rig.stages.driver.packages import driver_set, repo_distro
from vllm_rig.stages.driver.reboot import module_failure_reason, reboot_reasons
from vllm_rig.stages.preflight.facts import parse_holds


def test_repo_distro_names() -> None:
    assert repo_distro("ubuntu", "24.04") == "ubuntu2404" and repo_distro("debian", "12") == "debian12"


def test_ubuntu_sets_carry_the_branch_and_flavour() -> None:
    proprietary = driver_set("ubuntu2404", "proprietary", "580.159.03", "6.17.0-29-generic")
    assert proprietary.pinning == "nvidia-driver-pinning-580.159.03"
    assert "nvidia-dkms-580" in proprietary.packages and "nvidia-utils-580" in proprietary.packages
    assert proprietary.headers == ("linux-headers-6.17.0-29-generic", "linux-headers-generic")
    assert "nvidia-dkms-580-open" in driver_set("ubuntu2404", "open", "580.159.03", "k").packages


def test_debian_sets_use_debian_names() -> None:
    d = driver_set("debian12", "open", "580.159.03", "6.1.0-30-amd64")
    assert d.packages == ("nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-smi", "nvidia-persistenced")
    assert d.headers[1] == "linux-headers-amd64"


def test_held_packages_still_count_as_installed() -> None:
    lines = ["nvidia-smi\t580.159.03-1\thi ", "nvidia-kernel-open-dkms\t\tun ", "libcuda1\t580.159.03-1\tii "]
    assert parse_packages(lines) == {"nvidia-smi": "580.159.03-1", "libcuda1": "580.159.03-1"}
    assert parse_holds(lines) == ["nvidia-smi"]


def test_installed_at_ignores_the_debian_revision() -> None:
    packages = {"nvidia-smi": "580.159.03-1ubuntu1", "libcuda1": "580.159.03-1"}
    assert installed_at(packages, ("nvidia-smi", "libcuda1"), "580.159.03")
    assert not installed_at(packages, ("nvidia-smi", "libcuda1"), "580.159.04")
    assert not installed_at(packages, ("nvidia-smi", "nvidia-persistenced"), "580.159.03")
    assert held_candidates({**packages, "dkms": "3.4.0-1"}) == ["libcuda1", "nvidia-smi"]


def _state(**changes: object) -> dict:
    state = {"packages": {"nvidia-smi": "580.159.03-1"}, "loaded_version": "580.159.03", "nouveau_loaded": False}
    state.update(changes)
    return state


def test_reboot_only_when_the_loaded_module_is_not_the_installed_one() -> None:
    assert reboot_reasons(_state(), "580.159.03") == []
    assert reboot_reasons(_state(loaded_version=None), "580.159.03") == [
        "the loaded module is none, installed is 580.159.03"
    ]
    assert reboot_reasons(_state(nouveau_loaded=True), "580.159.03") == ["nouveau is loaded"]
    assert reboot_reasons(_state(packages={}), "580.159.03") == []  # nothing installed yet: nothing to load


def test_keyring_name_and_version_from_its_file_name() -> None:
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
    assert parse_deb_filename(url) == ("cuda-keyring", "1.1-1")


def test_cuda_toolkit_fact_reads_nvcc_and_libs() -> None:
    out = [
        "@@nvcc",
        "nvcc: NVIDIA (R) Cuda compiler driver",
        "Cuda compilation tools, release 12.9, V12.9.86",
        "@@libs",
        "libcudadevrt.a",
        "libcudart_static.a",
        "@@link",
        "/usr/local/cuda-12.9",
    ]
    assert CudaToolkit().process(out) == {
        "release": "12.9",
        "version": "12.9.86",
        "missing_libs": ["libculibos.a"],
        "cuda_link": "/usr/local/cuda-12.9",
    }


def _plan_on_fake_host(driver_state_output: list[str], version: str) -> bool:
    """Whether pinned_driver would change a @fake host whose DriverState fact prints the given output."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op

    from vllm_rig.stages.driver.apt_pin import pinned_driver

    inventory = Inventory((["@fake/box"], {"fake_responses": {"@@packages": driver_state_output}}))
    state = State(inventory, Config())
    connect_all(state)
    driver = driver_set("ubuntu2404", "open", version, "k")
    return add_op(state, pinned_driver, driver=driver, version=version)[inventory.get_host("@fake/box")].will_change


def test_a_matching_driver_from_elsewhere_is_left_alone() -> None:
    loaded_not_packaged = [
        "@@packages",
        "@@loaded",
        "580.159.04",
        "@@nouveau",
        "@@boot_id",
        "b",
        "@@kernel",
        "6.8.0-1-generic",
    ]
    assert _plan_on_fake_host(loaded_not_packaged, "580.159.04") is False
    assert _plan_on_fake_host(loaded_not_packaged, "580.159.03") is True  # a replace (preflight guards it)


# ---- a module that never loads: the one line after the one reboot -------------------------------------

_DIAG = {
    "kernel": "6.8.0-90-generic",
    "module_file": "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko",
    "dkms": ["nvidia/580.159.03, 6.8.0-90-generic, x86_64: installed"],
    "make_log": [],
    "journal": [],
}


def test_failure_reason_secure_boot_refusal_from_the_kernel_log() -> None:
    diag = {**_DIAG, "journal": ["Loading of module with unavailable key is rejected"]}
    reason = module_failure_reason(diag, "580.159.03")
    assert "refused the module under Secure Boot (Loading of module with unavailable key is rejected)" in reason
    assert "enroll the key" in reason


def test_failure_reason_bar1_refusal() -> None:
    line = "NVRM: kbusIsStaticBar1Supported_TU102: BAR1 size 266338304 is not large enough to map FB size23196598272"
    reason = module_failure_reason({**_DIAG, "journal": [line]}, "580.159.03")
    assert line in reason and "nvidia_driver_flavor=proprietary" in reason


def test_failure_reason_dkms_build_log() -> None:
    log = ["/var/lib/dkms/nvidia/580.159.03/build/make.log", "make: *** [Makefile:251: __sub-make] Error 2"]
    diag = {**_DIAG, "module_file": None, "dkms": ["nvidia/580.159.03: added"], "make_log": log}
    reason = module_failure_reason(diag, "580.159.03")
    assert reason == (
        "there is no nvidia module for kernel 6.8.0-90-generic: the DKMS build failed, see "
        "/var/lib/dkms/nvidia/580.159.03/build/make.log (it ends: make: *** [Makefile:251: __sub-make] Error 2)"
    )
    no_log = module_failure_reason({**diag, "make_log": []}, "580.159.03")
    assert "linux-headers-6.8.0-90-generic" in no_log and "dkms status: nvidia/580.159.03: added" in no_log


def test_module_failure_fact_parses_its_sections() -> None:
    out = [
        "@@kernel",
        "6.8.0-90-generic",
        "@@module",
        "modinfo: ERROR: Module nvidia not found.",
        "@@dkms",
        "@@makelog",
        "@@journal",
        "Loading of unsigned module is rejected",
    ]
    diag = ModuleFailure().process(out)
    assert diag["module_file"] is None and diag["journal"] == ["Loading of unsigned module is rejected"]
    assert "is rejected" in module_failure_reason(diag, "580.159.03")


def test_staging_only_where_secure_boot_meets_a_key_not_enrolled() -> None:
    mok = {"state": "not_enrolled", "key_present": True, "key": "/k", "cert": "/c"}
    assert needs_staging({"secure_boot": True, "mok": mok})
    assert needs_staging({"secure_boot": True, "mok": {**mok, "state": "missing", "key_present": False}})
    assert needs_staging({"secure_boot": True, "mok": {**mok, "state": "enrolled", "key_present": False}})
    assert not needs_staging({"secure_boot": True, "mok": {**mok, "state": "enrolled"}})
    assert not needs_staging({"secure_boot": True, "mok": {**mok, "state": "pending"}})
    assert not needs_staging({"secure_boot": False, "mok": mok})
    assert not needs_staging(None)
    assert mok_password_stdin("one-time") == "one-time\none-time\n"
    pending = {"secure_boot": True, "mok": {**mok, "state": "pending"}}
    assert "reboot the box at its console, choose Enroll MOK" in (enrollment_problem(pending) or "")
    assert enrollment_problem({"secure_boot": True, "mok": {**mok, "state": "enrolled"}}) is None


def test_headers_follow_the_installed_kernel_image_metapackage() -> None:
    from vllm_rig.stages.driver.packages import headers_metapackages

    hwe = ["linux-image-generic-hwe-24.04", "linux-image-7.0.0-12-generic", "linux-image-unsigned-7.0.0-12-generic"]
    d = driver_set("ubuntu2404", "proprietary", "580.159.03", "7.0.0-12-generic", hwe)
    assert d.headers == ("linux-headers-7.0.0-12-generic", "linux-headers-generic-hwe-24.04")  # not the GA 6.8 track
    assert headers_metapackages("ubuntu2404", ["linux-image-lowlatency", "linux-image-6.8.0-50-lowlatency"]) == (
        "linux-headers-lowlatency",
    )
    assert headers_metapackages("debian12", ["linux-image-cloud-amd64", "linux-image-6.1.0-30-cloud-amd64"]) == (
        "linux-headers-cloud-amd64",
    )
    # no image metapackage (a container, a hand-built kernel): the distribution's default track
    assert headers_metapackages("ubuntu2404", ["linux-image-6.8.0-50-generic"]) == ("linux-headers-generic",)
    assert headers_metapackages("debian12", []) == ("linux-headers-amd64",)


def test_dkms_gets_the_compiler_the_kernel_was_built_with() -> None:
    from vllm_rig.stages.driver.packages import kernel_compiler_package

    hwe = (
        "Linux version 6.14.0-24-generic (buildd@lcy02-amd64-101) (x86_64-linux-gnu-gcc-14 "
        "(Ubuntu 14.2.0-4ubuntu2~24.04) 14.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #24~24.04.3-Ubuntu"
    )
    assert kernel_compiler_package(hwe) == "gcc-14"
    ga = "Linux version 6.8.0-50-generic (buildd@x) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0, ...)"
    assert kernel_compiler_package(ga) == "gcc-13"
    assert kernel_compiler_package("Linux version 6.1.0-30-amd64 (gcc-12 (Debian 12.2.0-14) 12.2.0, ...)") == "gcc-12"
    assert kernel_compiler_package("Linux version 6.18.44 (builder@x) (gcc (GCC) 15.3.0, GNU ld 2.46)") is None


ARCHIVE = {
    "nvidia-driver-580": "580.173.02-0ubuntu0.24.04.1",
    "nvidia-utils-580": "580.173.02-0ubuntu0.24.04.1",
    "libnvidia-compute-580": "580.173.02-0ubuntu0.24.04.1",
    "nvidia-kernel-common-580": "580.173.02-0ubuntu0.24.04.1",
    "linux-modules-nvidia-580-generic": "6.8.0-50.51+1",
    "linux-modules-nvidia-580-6.8.0-50-generic": "6.8.0-50.51+1",
    "linux-generic": "6.8.0-50.51",
}


def test_an_archive_driver_is_told_from_nvidias_repo_build() -> None:
    from vllm_rig.stages.driver.packages import archive_driver

    assert archive_driver(ARCHIVE) == "580.173.02"
    nvidia_repo = {"nvidia-utils-580": "580.159.03-1ubuntu1", "libnvidia-compute-580": "580.159.03-1ubuntu1"}
    assert archive_driver(nvidia_repo) is None
    assert archive_driver({"nvidia-smi": "580.159.03-1"}) is None  # Debian names from NVIDIA's repo


def test_a_kept_archive_driver_is_pinned_at_its_versions_with_its_modules_and_kernel_track() -> None:
    from vllm_rig.stages.driver.apt_pin import archive_pin, held_candidates
    from vllm_rig.stages.driver.packages import ARCHIVE_HOLD_PATTERNS

    pin = archive_pin(ARCHIVE, ARCHIVE_HOLD_PATTERNS)
    assert "Pin: version 580.173.02-0ubuntu0.24.04.1\nPin-Priority: 1000" in pin
    assert "Package: libnvidia-compute-580 nvidia-driver-580 nvidia-kernel-common-580 nvidia-utils-580\n" in pin
    assert (
        "linux-modules-nvidia-580-6.8.0-50-generic linux-modules-nvidia-580-generic\nPin: version 6.8.0-50.51+1" in pin
    )
    # the kernel track is held with the signed modules: a kernel without its module never lands alone
    assert {"linux-generic", "linux-modules-nvidia-580-generic"} <= set(held_candidates(ARCHIVE, ARCHIVE_HOLD_PATTERNS))


def test_replacing_an_archive_driver_purges_canonicals_modules_first() -> None:
    lines = ["@@packages", *(f"{n}\t{v}\thi " for n, v in ARCHIVE.items()), "@@loaded", "580.173.02", "@@boot_id", "b"]
    lines += ["@@kernel", "6.8.0-1-generic"]
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op
    from pyinfra.context import ctx_host, ctx_state

    from vllm_rig.stages.driver.apt_pin import pinned_driver

    inventory = Inventory((["@fake/box"], {"fake_responses": {"@@packages": lines}}))
    state = State(inventory, Config())
    connect_all(state)
    box = inventory.get_host("@fake/box")
    driver = driver_set("ubuntu2404", "proprietary", "580.159.03", "6.8.0-50-generic")
    meta = add_op(state, pinned_driver, driver=driver, version="580.159.03")[box]
    with ctx_state.use(state), ctx_host.use(box):
        commands = [str(c) for c in state.ops[box][meta._hash].command_generator()]
    assert commands[0].startswith("apt-mark unhold") and "linux-modules-nvidia-580-generic" in commands[0]
    assert (
        "purge linux-modules-nvidia-580-6.8.0-50-generic linux-modules-nvidia-580-generic nvidia-driver-580"
        in commands[1]
    )
    assert commands[3].endswith("install nvidia-driver-pinning-580.159.03")
    assert "--allow-downgrades" in commands[4] and "nvidia-dkms-580" in commands[4]
    assert commands[4].endswith(" nvidia-kernel-common-580")  # archive builds left beside ours move too


def test_driver_reboot_ask_stops_the_host_with_what_to_do_instead_of_rebooting() -> None:
    """driver_reboot: ask: a box whose nouveau holds the GPUs gets no reboot, only the one line."""
    from tests.unit import fake_host
    from vllm_rig.stages.driver.reboot import ask_refusal, reboot_if_needed

    nouveau = ["@@packages", "nvidia-driver-cuda 580.159.03-1", "@@loaded", "@@nouveau", "nouveau", "@@boot_id",
               "b", "@@kernel", "6.8.0-1-generic"]  # fmt: skip
    state_out = {"@@packages": nouveau}
    _, commands = fake_host.plan(state_out, reboot_if_needed, version="580.159.03", ask=True)
    assert commands == [f"FunctionCommand(fail_host, ({ask_refusal('nouveau is loaded')!r},), {{}})"]
    _, auto = fake_host.plan(state_out, reboot_if_needed, version="580.159.03")
    assert any("systemctl reboot" in c for c in auto), auto
    assert ask_refusal("nouveau is loaded") == (
        "the driver needs a reboot (nouveau is loaded); driver_reboot is ask: reboot the box, then run again"
    )
