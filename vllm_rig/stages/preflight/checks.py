"""Preflight verdict: read-only checks on what a host reported, each with the way out when it fails.

Pure functions over fact data, so every rule is unit-tested without a host. tasks/preflight.py gathers
the facts, prints the table and stops a failing host before anything changes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from vllm_rig.host import gpu_rules
from vllm_rig.host.nvidia_smi import MISMATCH
from vllm_rig.settings import Settings
from vllm_rig.stages.driver.packages import archive_driver, archive_modules
from vllm_rig.stages.preflight.facts import Host
from vllm_rig.stages.preflight.gpu_facts import GpuInfo, GpusResult
from vllm_rig.stages.runtime import kinds

# PCI device ids of TU102 (RTX 2080 Ti, TITAN RTX, Quadro RTX 6000/8000).
TU102_IDS = frozenset({"1e02", "1e04", "1e07", "1e30", "1e36", "1e78"})
SUPPORTED_OS = {("ubuntu", "24.04"), ("debian", "12")}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str
    way_out: str = ""


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str, way_out: str = "") -> Check:
    return Check(name, "warn", detail, way_out)


def fail(name: str, detail: str, way_out: str) -> Check:
    return Check(name, "fail", detail, way_out)


def verdict(
    host: Host | None,
    gpus: GpusResult | None,
    s: Settings,
    model: dict[str, Any] | None = None,
) -> list[Check]:
    """Every check, in the order a person would read them (the model's when its fact was read)."""
    if not host:
        return [fail("host", "could not read the host's state", "check that sh, df and /proc are there")]
    checks = [
        check_os(host),
        check_cpu(host),
        check_ram(host, s),
        check_disk(host, s),
        check_pci_gpus(host, s),
        *check_pci_bar1(host, gpus, s),
        check_secure_boot(host, s),
        check_nouveau(host),
        check_headers(host),
        check_existing_driver(host, gpus, s),
        *check_driver_flavour(host, s),
        check_dpkg_lock(host),
        *check_cuda_sources(host),
    ]
    checks += check_driver_gpus(gpus, s, host["driver_loaded"], installed_driver_version(host))
    checks += check_links(gpus, s)
    if model is not None:
        checks.append(check_model(model, s))
    return checks


def check_os(host: Host) -> Check:
    os = host["os"]
    if (os["id"], os["version_id"]) in SUPPORTED_OS and host["arch"] == "x86_64":
        return ok("os", f"{os['pretty']} ({host['arch']}, kernel {host['kernel']})")
    return fail("os", f"{os['pretty'] or 'unknown'} on {host['arch']}", "use Ubuntu 24.04 (or Debian 12) on x86_64")


def check_cpu(host: Host) -> Check:
    if host["cpus"] >= 4:
        return ok("cpu", f"{host['cpus']} threads")
    return warn("cpu", f"{host['cpus']} threads", "the CUDA build will take hours; 4+ threads recommended")


def check_ram(host: Host, s: Settings) -> Check:
    if host["ram_gb"] >= s.min_ram_gb:
        return ok("ram", f"{host['ram_gb']} GB")
    return fail("ram", f"{host['ram_gb']} GB, need {s.min_ram_gb}", "add RAM or lower min_ram_gb and build_max_jobs")


def disk_floor(s: Settings) -> tuple[int, str]:
    """(free GB the box needs, for what): min_free_disk_gb when set, else by what the runtime kind builds."""
    if s.min_free_disk_gb is not None:
        return s.min_free_disk_gb, "min_free_disk_gb"
    return kinds.of(s).disk


def check_disk(host: Host, s: Settings) -> Check:
    where = f"free under {s.install_root}"
    need, why = disk_floor(s)
    if host["disk_free_gb"] >= need:
        return ok("disk", f"{host['disk_free_gb']} GB {where}")
    return fail(
        "disk",
        f"{host['disk_free_gb']} GB {where}, need {need} for {why}",
        "free space there, or point install_root and model_dir at a bigger disk",
    )


def check_pci_gpus(host: Host, s: Settings) -> Check:
    pci = host["pci_gpus"]
    if not pci["available"]:
        return warn("pci", "lspci is not installed; PCI check skipped", "apt-get install pciutils")
    found = len(pci["devices"])
    if found < s.gpu_count:
        slots = ", ".join(d["slot"] for d in pci["devices"]) or "none"
        return fail(
            "pci",
            f"{found} NVIDIA GPU(s) on the PCI bus ({slots}), need {s.gpu_count}",
            "reseat the missing card and check its power cables, or lower gpu_count",
        )
    not_tu102 = [d["device_id"] for d in pci["devices"] if d["device_id"] not in TU102_IDS]
    if not_tu102 and s.gpu_compute_capability == "7.5":
        return warn("pci", f"{found} NVIDIA GPUs, not all TU102 (device ids {', '.join(not_tu102)})")
    return ok("pci", f"{found} NVIDIA GPUs on the PCI bus")


# How to make dkms's signing key where it is missing: Ubuntu's shim-signed tool, else what dkms >= 3.1.7
# itself runs (RSA 2048, codeSigning; dkms-project/dkms README, "Module signing").
MAKE_KEY = {
    "ubuntu": "sudo update-secureboot-policy --new-key",
    "debian": 'sudo openssl req -new -x509 -nodes -days 36500 -subj "/CN=DKMS module signing key" '
    "-newkey rsa:2048 -addext extendedKeyUsage=codeSigning -keyout {key} -outform DER -out {cert}",
}


def enrollment_steps(host: Host) -> str:
    """What the owner does at the box so that the DKMS-built module loads under Secure Boot."""
    mok = host.get("mok") or {}
    key, cert = mok.get("key") or "the dkms signing key", mok.get("cert") or "its certificate"
    steps = []
    if mok.get("state") == "missing" or not mok.get("key_present", True):
        make = MAKE_KEY.get(host["os"]["id"], MAKE_KEY["debian"]).format(key=key, cert=cert)
        steps.append(f"make the key: {make}")
    steps += [
        f"enroll it: sudo mokutil --import {cert} (choose a one-time password)",
        "reboot at the console and choose Enroll MOK in MokManager, then Continue, Yes, the password",
        "run the deploy again",
    ]
    numbered = "; ".join(f"{n}) {step}" for n, step in enumerate(steps, 1))
    return (
        f"{numbered}. Or set secure_boot_mok_enrollment=deploy_stages (with secure_boot_mok_password) to have "
        "the deploy stage steps 1-2, or disable Secure Boot in the firmware setup"
    )


def check_secure_boot(host: Host, s: Settings) -> Check:
    """Under Secure Boot the DKMS module loads only when the key dkms signs with is enrolled."""
    state, source = host["secure_boot"], host.get("secure_boot_source")
    if state is None:
        # Unknown is not off: under Secure Boot an unenrolled DKMS module would not load after the reboot.
        return warn(
            "secure boot",
            "not reported (no mokutil and no readable SecureBoot EFI variable)",
            "install mokutil (sudo apt-get install mokutil) and run preflight again, or check the firmware "
            "setup: with Secure Boot on, the DKMS-built module loads only once its key is enrolled",
        )
    if state is False and source and "validation is disabled in shim" in source:
        return ok(
            "secure boot",
            "enabled in the firmware, but shim's validation is disabled (mokutil --sb-state): module signatures "
            "are not enforced, no MOK enrollment needed",
        )
    if state is False:
        return ok("secure boot", f"disabled ({source})" if source else "disabled")
    if s.nvidia_keep_archive_driver and archive_modules(host.get("packages") or {}):
        # Canonical signs linux-modules-nvidia-* with its own key, which the shim trusts: no MOK, no DKMS.
        return ok("secure boot", "enabled; the kept archive driver's modules are Canonical-signed (no MOK needed)")
    mok = host.get("mok") or {}
    cert, mok_state = mok.get("cert") or "the dkms certificate", mok.get("state", "unknown")
    if mok_state == "enrolled" and mok.get("key_present", True):
        return ok("secure boot", f"enabled; dkms signs with {cert}, which is enrolled")
    if mok_state == "pending":
        return fail(
            "secure boot",
            f"enabled; {cert} waits to be enrolled at the next boot",
            "reboot at the console and choose Enroll MOK in MokManager (Continue, Yes, the password given at "
            "import), then run the deploy again",
        )
    if mok_state == "unknown":
        return fail(
            "secure boot",
            f"enabled; cannot tell whether {cert} is enrolled ({mok.get('detail') or 'mokutil gave no answer'})",
            "install mokutil (sudo apt-get install mokutil), then run the deploy again",
        )
    if mok_state == "enrolled":  # the certificate is, but its private key is gone: dkms would make a new pair
        detail = f"enabled; {cert} is enrolled but {mok.get('key')} is missing, so dkms would sign with a new key"
    else:
        where = "not there yet" if mok_state == "missing" else "not enrolled"
        detail = f"enabled; dkms signs with {cert}, which is {where}"
    if s.secure_boot_mok_enrollment == "deploy_stages":
        return warn("secure boot", detail, "the driver stage stages the enrollment, then stops for the console")
    return fail("secure boot", detail + ": the DKMS-built module will not load", enrollment_steps(host))


def check_pci_bar1(host: Host, gpus: GpusResult | None, s: Settings) -> list[Check]:
    """Before any driver: the open modules refuse a card whose BAR1 cannot map all of its memory (static
    BAR1 on Turing); lspci reads BAR1 from the PCI config space. nvidia-smi's check takes over once it answers."""
    bars = host.get("pci_bar1_mib")
    if s.nvidia_driver_flavor != "open" or not bars or (gpus and gpus.get("rc") == 0):
        return []
    small = {slot: mib for slot, mib in sorted(bars.items()) if mib < s.gpu_min_memory_mib}
    if not small:
        return [ok("bar1", ", ".join(f"{slot} {mib} MiB" for slot, mib in sorted(bars.items())))]
    return [
        fail(
            "bar1",
            "BAR1 (lspci Region 1) "
            + ", ".join(f"{slot} {mib} MiB" for slot, mib in small.items())
            + f" is smaller than the card's memory ({s.gpu_min_memory_mib} MiB or more)",
            "the open kernel modules refuse such a card (kbusIsStaticBar1Supported_TU102): use "
            "nvidia_driver_flavor=proprietary, or enable Resizable BAR / Above 4G decoding in the firmware",
        )
    ]


def check_cuda_sources(host: Host) -> list[Check]:
    """A hand-written source for NVIDIA's repository beside the keyring package's makes apt stop with
    "Conflicting values set for option Signed-By" when the keys differ."""
    extra = host.get("cuda_sources") or []
    if not extra:
        return []
    files = ", ".join(e["file"] for e in extra)
    return [
        fail(
            "apt sources",
            f"{files} also name{'s' if len(extra) == 1 else ''} NVIDIA's CUDA repository",
            f"remove {files}: the keyring package's cuda-<distro>-x86_64.list is the one apt uses, and two "
            "entries with different Signed-By stop apt",
        )
    ]


def check_nouveau(host: Host) -> Check:
    if "nouveau" in host["modules"]:
        return warn("nouveau", "loaded", "the driver stage blacklists it and reboots once")
    return ok("nouveau", "not loaded")


def check_headers(host: Host) -> Check:
    if host["headers"]:
        return ok("headers", f"present for {host['kernel']}")
    return warn("headers", f"missing for {host['kernel']}", f"the driver stage installs linux-headers-{host['kernel']}")


def installed_driver_version(host: Host) -> str | None:
    """The driver version dpkg has, from the utilities package that carries nvidia-smi."""
    for name, version in host["packages"].items():
        if name.startswith(("nvidia-driver", "nvidia-utils", "libnvidia-compute", "libcuda1")):
            return version.split("-", 1)[0]
    return None


def _loaded_module(host: Host) -> str:
    """What the driver line says of the loaded module (/proc/driver/nvidia/version): its flavour and
    version ("; loaded: the open module 580.159.03"), or nothing when none is loaded."""
    version = host.get("driver_loaded")
    if not version:
        return ""
    flavour = host.get("driver_flavour")
    return f"; loaded: the {flavour} module {version}" if flavour else f"; loaded: module {version}"


def check_existing_driver(host: Host, gpus: GpusResult | None, s: Settings) -> Check:
    found = installed_driver_version(host) or host["driver_loaded"]
    if gpus and gpus.get("gpus"):
        found = found or gpus["driver_version"]
    if found is None:
        return ok("driver", "none installed")
    loaded = _loaded_module(host)
    archive = archive_driver(host["packages"])
    if archive:
        signed = any(n.startswith("linux-modules-nvidia-") for n in host["packages"])
        what = f"{archive} from Ubuntu's archive" + (" with Canonical's signed modules" if signed else "")
        if s.nvidia_keep_archive_driver:
            return ok("driver", f"{what}: kept as it is (pinned and held, no DKMS){loaded}")
        if s.nvidia_driver_replace_existing:
            return warn("driver", what + loaded, f"it will be replaced by NVIDIA's {s.nvidia_driver_version} (DKMS)")
        return fail(
            "driver",
            f"{what} is installed, settings ask for NVIDIA's {s.nvidia_driver_version}{loaded}",
            "keep it as it is: set nvidia_keep_archive_driver=true; "
            "or replace it: set nvidia_driver_replace_existing=true",
        )
    if found == s.nvidia_driver_version:
        return ok("driver", f"{found} (the pinned version){loaded}")
    if found == host.get("rig_driver"):
        return warn("driver", f"{found} installed by vllm-rig{loaded}", f"planned upgrade to {s.nvidia_driver_version}")
    if s.nvidia_driver_replace_existing:
        return warn("driver", f"{found} installed{loaded}", f"it will be replaced by {s.nvidia_driver_version}")
    return fail(
        "driver",
        f"{found} is installed, settings ask for {s.nvidia_driver_version}{loaded}",
        f"keep it: set nvidia_driver_version={found}; or replace it: set nvidia_driver_replace_existing=true",
    )


def check_driver_flavour(host: Host, s: Settings) -> list[Check]:
    """The loaded module's flavour against nvidia_driver_flavor. The driver stage installs the pinned flavour's
    packages and reboots for a version change only, so the other flavour's module would stay loaded."""
    loaded = host.get("driver_flavour")
    if not loaded or not host.get("driver_loaded"):
        return []
    if loaded == s.nvidia_driver_flavor:
        return [ok("driver flavour", f"the {loaded} module is loaded, as nvidia_driver_flavor asks")]
    return [
        fail(
            "driver flavour",
            f"the {loaded} module {host['driver_loaded']} is loaded, "
            f"settings pin nvidia_driver_flavor={s.nvidia_driver_flavor}",
            f"keep what runs: set nvidia_driver_flavor={loaded}; or remove the {loaded} driver packages and reboot "
            "before deploying",
        )
    ]


def check_dpkg_lock(host: Host) -> Check:
    if host["dpkg_locked"]:
        return warn("dpkg lock", "held (unattended-upgrades?)", "apt steps wait and retry")
    return ok("dpkg lock", "free")


def check_driver_gpus(
    gpus: GpusResult | None, s: Settings, host_loaded: str | None = None, installed: str | None = None
) -> list[Check]:
    """What nvidia-smi says, once a driver is there (host_loaded: the loaded module's version; installed:
    the packaged driver's)."""
    if gpus is None:
        return [ok("nvidia-smi", "not installed yet (the driver stage installs it)")]
    if gpus["rc"] != 0:
        error = gpus["error"] or ""
        if MISMATCH in error:
            versions = [
                f"NVML library {gpus['library_version']}" if gpus.get("library_version") else "",
                f"loaded module {host_loaded}" if host_loaded else "",
            ]
            said = ", ".join(v for v in versions if v)
            detail = f"{error} ({said})" if said else error
            return [warn("nvidia-smi", detail, "a reboot loads the installed driver (the driver stage does it)")]
        if not host_loaded and installed == s.nvidia_driver_version:
            # The pinned driver is installed but no module is loaded: the driver stage reboots once for it,
            # or says why it does not load (a plain FAIL here would hide that reason behind nvidia-smi's).
            return [
                warn(
                    "nvidia-smi",
                    gpus["error"] or "failed",
                    "no nvidia module is loaded: the driver stage reboots once for it, or says why it does not load",
                )
            ]
        return [fail("nvidia-smi", gpus["error"] or "failed", "check `dmesg | grep -i nvidia` and the driver install")]
    if gpus["problem"]:
        return [fail("nvidia-smi", gpus["problem"], "run nvidia-smi -q -x on the host to see what it prints")]
    found = gpus["gpus"]
    checks = [
        ok("gpus", f"{len(found)} x {found[0]['name']}")
        if len(found) >= s.gpu_count
        else fail(
            "gpus", f"nvidia-smi sees {len(found)} GPU(s), need {s.gpu_count}", "reseat the card or lower gpu_count"
        )
    ]
    for gpu in found:
        checks += _gpu_checks(gpu, s)
    return checks


def _gpu_checks(gpu: GpuInfo, s: Settings) -> list[Check]:
    """One GPU's line(s), by the rules the verdict shares (vllm_rig/host/gpu_rules.py). nvidia-smi says N/A for
    what it cannot read (a riser's link width): that value is None here and is said, never compared."""
    name = f"gpu{gpu['index']}"
    checks = []
    memory = gpu.get("memory_mib")
    if short := gpu_rules.memory_problem(gpu, s.gpu_min_memory_mib):
        checks.append(fail(name, short, f"need {s.gpu_min_memory_mib} MiB (a 22 GB card)"))
    if off := gpu_rules.capability_problem(gpu, s.gpu_compute_capability):
        checks.append(fail(name, off, f"{kinds.of(s).capability_line(s)} {s.gpu_compute_capability}"))
    bar1 = gpu.get("bar1_mib")
    if s.nvidia_driver_flavor == "open" and bar1 is not None and memory is not None and bar1 < memory:
        checks.append(
            fail(
                name,
                f"BAR1 {bar1} MiB is smaller than its {memory} MiB",
                "the open kernel modules do not bring up a modded 22 GB card with a small BAR1: use "
                "nvidia_driver_flavor=proprietary, or enable Resizable BAR / Above 4G decoding in the firmware",
            )
        )
    width = gpu.get("pcie_width")
    if width is not None and width < 8:
        checks.append(warn(name, f"PCIe x{width}", "x8 or wider recommended; NVLink carries TP traffic"))
    bar1_text = f", BAR1 {bar1} MiB" if bar1 is not None else ""
    width_text = f"x{width}" if width is not None else "width not reported"
    return checks or [ok(name, f"{memory} MiB, CC {gpu['compute_cap']}, PCIe {width_text}{bar1_text}")]


def check_links(gpus: GpusResult | None, s: Settings) -> list[Check]:
    """NVLink and the driver's P2P grant between every pair of the GPUs the rig uses (the first gpu_count
    that nvidia-smi lists), and every NVLink of those GPUs up: the verdict's rules (gpu_rules.links)."""
    if s.gpu_count < 2 or not gpus or gpus["rc"] != 0 or len(gpus["gpus"]) < 2 or not (topo := gpus["links"]):
        return []  # fewer than two GPUs seen: the GPU count check already says so
    if topo["error"]:  # one line: what could not be read, not a guess from half a matrix
        return [
            warn(
                "nvlink",
                f"NVLink and P2P not read: {topo['error']}",
                "run nvidia-smi topo -m and nvidia-smi nvlink -s on the host to see why",
            )
        ]
    used = [gpu["index"] for gpu in gpus["gpus"][: s.gpu_count]]
    found = gpu_rules.links(topo["topo"], topo["p2p"], topo["nvlink_down"], used)
    return [_nvlink_check(found, topo["nvlink"], used), _p2p_check(found)]


def _nvlink_check(found: gpu_rules.Links, nvlink: dict, used: list[int]) -> Check:
    seat = "seat the NVLink bridge: GeForce Turing has no PCIe P2P, so TP traffic goes through the CPU"
    pairs = ", ".join(f"{p} {k}" for p, k in found.kinds.items())
    if problem := found.nvlink_problem():
        if found.down and not found.all_down and not found.not_nvlink():
            way = "reseat the NVLink bridge (a link down halves the bandwidth between the pair)"
            return warn("nvlink", f"{problem} ({pairs})", way)
        return warn("nvlink", problem, seat)
    up = {i: [v for v in nvlink.get(i, []) if v] for i in used}
    counts = {len(v) for v in up.values()}
    speeds = sorted({v for links in up.values() for v in links})
    if not speeds:
        rate = "link speeds not reported"
    elif len(counts) == 1:
        rate = f"{counts.pop()} link(s) per GPU up at {'/'.join(f'{v:g}' for v in speeds)} GB/s"
    else:
        rate = ", ".join(f"GPU{i} {len(v)} link(s)" for i, v in up.items()) + f" up at {speeds[0]:g} GB/s"
    return ok("nvlink", f"{pairs}; {rate}")


def _p2p_check(found: gpu_rules.Links) -> Check:
    if not (refused := found.refused()):
        grants = found.grants
        return ok("p2p", "driver grants P2P (OK)" + (f" for {', '.join(grants)}" if len(grants) > 1 else ""))
    return warn("p2p", "driver reports " + ", ".join(f"{pair} {grant or 'unknown'}" for pair, grant in refused.items()))


def check_model(model: dict[str, Any], s: Settings) -> Check:
    """The endpoint has model_repo@model_revision and the disk holds what is still to download."""
    name = f"{s.model_repo}@{s.model_revision}"
    if model.get("ok") and model.get("state") == "complete":
        size = _gb(model.get("total_bytes"))
        return ok("model", f"{name} complete on the host (commit {str(model.get('commit'))[:12]}, {size}); not fetched")
    if model.get("ok"):
        commit, size = str(model.get("commit"))[:12], _gb(model.get("total_bytes"))
        free = f"{_gb(model.get('free_bytes'))} free in {model.get('where')}"
        return ok("model", f"{name} is commit {commit}: {model.get('file_count')} files, {size}; {free}")
    ways_out = {
        "endpoint": "check model_repo and model_revision, or use an hf_endpoint that has them "
        "(a private or gated repo needs hf_token)",
        "unreachable": "check hf_endpoint and that this host reaches it (proxy, DNS, firewall)",
        "disk": "free space there, or point model_dir at a bigger disk",
    }
    kind = str(model.get("kind"))
    return fail(
        "model", str(model.get("problem")), ways_out.get(kind, "run vllm_rig/host/model_preflight.py on the host")
    )


def _gb(n: object) -> str:
    if not isinstance(n, int | float):
        return "? GB"
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def has_failures(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


def render_table(host_name: str, checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"preflight verdict for {host_name}: {'FAIL' if has_failures(checks) else 'GO'}"]
    for c in checks:
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[c.status]
        line = f"  {mark} {c.name.ljust(width)}  {c.detail}"
        lines.append(line + (f"  -> {c.way_out}" if c.way_out and c.status != "ok" else ""))
    return "\n".join(lines)


def render_json(host_name: str, checks: list[Check]) -> str:
    return json.dumps(
        {"host": host_name, "go": not has_failures(checks), "checks": [asdict(c) for c in checks]}, sort_keys=True
    )
