"""Driver: NVIDIA's apt repository, the exact driver pinned and held, nouveau off, DKMS with headers for
this and future kernels, a reboot only when the loaded module is not the installed one, and the
boot-time GPU guard (module present, persistence, power limit, all GPUs visible).

An installed driver of another version is never replaced unless nvidia_driver_replace_existing is set
(preflight stops the host first). Changing nvidia_driver_version is a planned upgrade: unhold, move,
hold again, one reboot.
"""

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, files, systemd

from vllm_rig.context import settings
from vllm_rig.driver_packages import driver_set, repo_distro
from vllm_rig.facts.host import HostState
from vllm_rig.layout import DRIVER_RECORD, ETC_DIR, GUARD_UNIT, STATE_DIR, Layout
from vllm_rig.operations.apt_pin import hold_driver, pinned_driver
from vllm_rig.operations.keyring import keyring_deb
from vllm_rig.operations.reboot import reboot_if_needed
from vllm_rig.operations.stamp import once_per_key

KEYRING = "cuda-keyring_1.1-1_all.deb"
NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0\n"


@deploy("Driver")
def install_driver() -> None:
    s = settings()
    layout = Layout.of(s)
    box = host.get_fact(HostState, path=s.install_root)  # OS and kernel: the run does not change them
    if not box:
        return  # the host's state could not be read: preflight has already failed it
    distro = repo_distro(box["os"]["id"], box["os"]["version_id"])
    driver = driver_set(distro, s.nvidia_driver_flavor, s.nvidia_driver_version, box["kernel"])

    files.put(
        name="apt waits for the dpkg lock (unattended-upgrades) instead of failing",
        src=StringIO('DPkg::Lock::Timeout "600";\n'),
        dest="/etc/apt/apt.conf.d/50vllm-rig-lock-wait",
        mode="644",
    )
    files.template(
        name="Unattended upgrades leave the driver alone",
        src="templates/apt-nvidia-hold.conf.j2",
        dest="/etc/apt/apt.conf.d/51vllm-rig-nvidia-blacklist",
        mode="644",
    )
    keyring = keyring_deb(
        name="NVIDIA CUDA repository (keyring package)",
        url=s.nvidia_repo_url.format(distro=distro) + KEYRING,
    )
    apt.update(name="Refresh package lists for NVIDIA's repository", _if=keyring.did_change)
    apt.packages(
        name="Kernel headers (this kernel and future ones) and DKMS",
        packages=[*driver.headers, "dkms"],
        no_recommends=True,
        extra_install_args="-o DPkg::Lock::Timeout=600",
    )
    pinned_driver(
        name=f"NVIDIA driver {s.nvidia_driver_version} ({s.nvidia_driver_flavor})",
        driver=driver,
        version=s.nvidia_driver_version,
    )
    hold_driver(name="Hold the driver packages")
    files.put(
        name="Record the driver version vllm-rig manages",
        src=StringIO(f"{s.nvidia_driver_version}\n"),
        dest=DRIVER_RECORD,
        mode="644",
    )

    blacklist = files.put(
        name="Blacklist nouveau",
        src=StringIO(NOUVEAU_BLACKLIST),
        dest="/etc/modprobe.d/vllm-rig-blacklist-nouveau.conf",
        mode="644",
    )
    once_per_key(
        name="Rebuild the initramfs without nouveau",
        command="if command -v update-initramfs >/dev/null; then update-initramfs -u; fi",
        stamp=f"{STATE_DIR}/initramfs-nouveau.stamp",
        key=NOUVEAU_BLACKLIST.replace("\n", ";"),
    )

    guard_script = f"{layout.bin_dir}/vllm-rig-gpu-guard"
    guard_env = f"{ETC_DIR}/gpu-guard.env"
    script = files.put(name="GPU guard script", src="files/vllm-rig-gpu-guard.sh", dest=guard_script, mode="755")
    env = files.template(
        name="GPU guard settings",
        src="templates/gpu-guard.env.j2",
        dest=guard_env,
        mode="644",
        gpu_count=s.gpu_count,
        power_limit_w="" if s.gpu_power_limit_w is None else s.gpu_power_limit_w,
    )
    unit = files.template(
        name="GPU guard unit",
        src="templates/gpu-guard.service.j2",
        dest=f"/etc/systemd/system/{GUARD_UNIT}",
        mode="644",
        service_name=s.service_name,
        env_file=guard_env,
        script=guard_script,
        timeout_s=600,
    )
    systemd.daemon_reload(name="Reload systemd units", _if=unit.did_change)

    reboot_if_needed(
        name="Reboot if the loaded driver is not the installed one",
        version=s.nvidia_driver_version,
        timeout=s.reboot_timeout_s,
    )
    systemd.service(name="GPU guard enabled and done", service=GUARD_UNIT, running=True, enabled=True)
    systemd.service(
        name="Re-run the GPU guard after its settings changed",
        service=GUARD_UNIT,
        restarted=True,
        _if=lambda: script.did_change() or env.did_change() or unit.did_change(),
    )
    del blacklist


install_driver()
