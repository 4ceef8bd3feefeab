"""Driver: NVIDIA's apt repository, the exact driver pinned and held, nouveau off, DKMS with headers for
this and future kernels, a reboot only when the loaded module is not the installed one, and the
boot-time GPU guard (module present, persistence, power limit, all GPUs visible).

An installed driver of another version is never replaced unless nvidia_driver_replace_existing is set
(preflight stops the host first). Changing nvidia_driver_version is a planned upgrade: unhold, move,
hold again, one reboot.
"""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd

from vllm_rig.core.checks import require
from vllm_rig.core.files import config_files, rendered, shipped, text
from vllm_rig.core.packages import distro_packages, lists_fresh
from vllm_rig.core.run import host_failed
from vllm_rig.core.stamp import stamped
from vllm_rig.paths import DRIVER_RECORD, ETC_DIR, GUARD_UNIT, INITRAMFS_STAMP, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.driver.apt_pin import ARCHIVE_PIN_FILE, archive_pin, hold_driver, pinned_driver
from vllm_rig.stages.driver.keyring import keyring_deb
from vllm_rig.stages.driver.mok import enrollment_problem, mok_enrollment_staged, mok_password_stdin
from vllm_rig.stages.driver.packages import (
    ARCHIVE_HOLD_PATTERNS,
    archive_driver,
    driver_set,
    kernel_compiler_package,
    repo_distro,
)
from vllm_rig.stages.driver.reboot import reboot_if_needed
from vllm_rig.stages.preflight.facts import HostState
from vllm_rig.stages.preflight.host_state import host_state

KEYRING = "cuda-keyring_1.1-1_all.deb"
NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0\n"
NOUVEAU_FILE = "/etc/modprobe.d/vllm-rig-blacklist-nouveau.conf"
LOCK_WAIT_FILE = "/etc/apt/apt.conf.d/50vllm-rig-lock-wait"
UNATTENDED_FILE = "/etc/apt/apt.conf.d/51vllm-rig-nvidia-blacklist"  # unattended-upgrades leaves the driver alone
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/vllm-rig.conf"
# Ubuntu-style packaging runs the daemon with --no-persistence-mode; NVIDIA's own driver role replaces
# ExecStart the same way, so the daemon (not a one-shot nvidia-smi -pm 1) holds persistence mode.
PERSISTENCED_EXEC = (
    "# Rendered by vllm-rig: the daemon holds persistence mode on.\n"
    "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode --verbose\n"
)


@deploy("Driver")
def install_driver(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    box = host_state(s.install_root)  # OS and kernel: the run does not change them
    if not box:
        return  # the host's state could not be read: preflight has already failed it
    distro = repo_distro(box["os"]["id"], box["os"]["version_id"])
    driver = driver_set(distro, s.nvidia_driver_flavor, s.nvidia_driver_version, box["kernel"], box["packages"])
    compiler = kernel_compiler_package(box["proc_version"])  # DKMS builds with the kernel's own gcc
    # Ubuntu's archive driver with Canonical's signed modules, kept as it is when the settings say so.
    archive = archive_driver(box["packages"]) if s.nvidia_keep_archive_driver else None
    managed = archive or s.nvidia_driver_version

    if s.secure_boot_mok_enrollment == "deploy_stages":
        mok_enrollment_staged(
            name="Secure Boot: stage the enrollment of dkms's signing key",
            install_root=s.install_root,
            _stdin=mok_password_stdin(s.secure_boot_mok_password),  # mokutil asks twice; never on a command line
        )
        require(
            name="Secure Boot: dkms's key is enrolled before the driver goes in",
            problem=lambda: enrollment_problem(host.get_fact(HostState, path=s.install_root)),
        )
    config_files(
        name="apt and modprobe: wait for the dpkg lock, keep unattended upgrades off the driver, no nouveau",
        files=(
            text(LOCK_WAIT_FILE, 'DPkg::Lock::Timeout "600";\n'),
            rendered(UNATTENDED_FILE, "driver/apt-nvidia-hold.conf.j2"),
            text(NOUVEAU_FILE, NOUVEAU_BLACKLIST),
        ),
    )
    keyring_deb(
        name="NVIDIA CUDA repository (keyring package)",
        url=s.nvidia_repo_url.format(distro=distro) + KEYRING,
        fingerprint=s.nvidia_repo_key_fingerprint,
    )
    if archive:
        lists_fresh(name="Package lists are less than a day old", packages=[])
        config_files(
            name=f"Pin Ubuntu's archive driver {archive} as installed (no DKMS swap)",
            files=(text(ARCHIVE_PIN_FILE, archive_pin(box["packages"], ARCHIVE_HOLD_PATTERNS)),),
        )
        hold_driver(
            name="Hold the archive driver, its signed modules and the kernel track", patterns=ARCHIVE_HOLD_PATTERNS
        )
    else:
        lists_fresh(
            name="Package lists know the driver packages and are less than a day old",
            packages=[driver.pinning, *driver.headers, "dkms", *([compiler] if compiler else []), *driver.packages],
        )
        distro_packages(
            name="Kernel headers (this kernel and its track's future ones), DKMS and the kernel's compiler",
            packages=[*driver.headers, "dkms", *([compiler] if compiler else [])],
        )
        pinned_driver(
            name=f"NVIDIA driver {s.nvidia_driver_version} ({s.nvidia_driver_flavor})",
            driver=driver,
            version=s.nvidia_driver_version,
        )
        hold_driver(name="Hold the driver packages")
    config_files(
        name="Record the driver version vllm-rig manages",
        files=(text(DRIVER_RECORD, f"{managed}\n"),),
    )
    stamped(
        name="Rebuild the initramfs without nouveau",
        command="if command -v update-initramfs >/dev/null; then update-initramfs -u; fi",
        stamp=INITRAMFS_STAMP,
        key=NOUVEAU_BLACKLIST.replace("\n", ";"),
    )

    guard_script, guard_env = f"{layout.bin_dir}/vllm-rig-gpu-guard", f"{ETC_DIR}/gpu-guard.env"
    guard = config_files(
        name="GPU guard: script, settings, unit",
        files=(
            shipped(guard_script, "driver/vllm-rig-gpu-guard.sh", mode="755"),
            rendered(
                guard_env,
                "driver/gpu-guard.env.j2",
                gpu_count=s.gpu_count,
                power_limit_w="" if s.gpu_power_limit_w is None else s.gpu_power_limit_w,
            ),
            text(PERSISTENCED_DROPIN, PERSISTENCED_EXEC),
            rendered(
                f"/etc/systemd/system/{GUARD_UNIT}",
                "driver/gpu-guard.service.j2",
                service_name=s.service_name,
                env_file=guard_env,
                script=guard_script,
                timeout_s=600,
            ),
        ),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=guard.did_change)

    reboot_if_needed(
        name="Reboot if the loaded driver is not the installed one",
        version=managed,
        timeout=s.reboot_timeout_s,
        ask=s.driver_reboot == "ask",
    )
    systemd.service(name="GPU guard enabled and done", service=GUARD_UNIT, running=True, enabled=True)
    # Restarting the daemon re-runs the guard too (PartOf): persistence from the daemon, then the power limit.
    systemd.service(
        name="Restart nvidia-persistenced and the GPU guard after their files changed",
        service="nvidia-persistenced.service",
        restarted=True,
        _if=guard.did_change,
    )
