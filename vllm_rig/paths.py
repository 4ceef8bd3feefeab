"""Where things live on a host. One place, so stages, templates and checks agree.

<install_root>/runtimes/<build fingerprint>/   a built runtime: venv/, src/vllm (the fork), src/flashqla
<install_root>/current -> runtimes/<fp>         the runtime the service runs; previous -> the last good one
<install_root>/tools/venv/                      host tools (huggingface_hub for the model fetch)
<install_root>/bin/                             vllm-rig-host.pyz (vllm_rig/host/), the rig's shell scripts
/var/lib/vllm-rig/                              state: fingerprints, markers, background job logs
/etc/vllm-rig/                                  config: the service's env file with the API key (0600)
/etc/vllm-rig/lan/                              the LAN proxy's TLS files (local CA, certificate) and key map
/etc/vllm-rig/keys/<name>                       each client's key (api_keys, bin/rig keys), root only
/etc/nginx/conf.d/vllm-rig-lan.conf             the LAN proxy's nginx site
/etc/vllm-rig/front/, /etc/nginx/conf.d/vllm-rig-front.conf   one URL for several boxes (front_of)
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_rig.settings import Settings

STATE_DIR = "/var/lib/vllm-rig"
ETC_DIR = "/etc/vllm-rig"
GUARD_UNIT = "vllm-rig-gpu-guard.service"
# The driver version vllm-rig installed: a different pin on the next run is a planned upgrade, while a
# driver without this record is someone else's and is never replaced unless the settings say so.
DRIVER_RECORD = f"{STATE_DIR}/driver-version"
FLASHINFER_CHECK = "check-flashinfer-pr3621-sm75.sh"
# The model download: one transient unit per host (one model_dir), its progress file, and the HF token
# (0600, read by systemd through EnvironmentFile= so it is never on a command line).
MODEL_FETCH_UNIT = "vllm-rig-model-fetch.service"
MODEL_FETCH_STATUS = f"{STATE_DIR}/model-fetch.json"
HF_TOKEN_FILE = f"{ETC_DIR}/hf-token.env"
# A model peer (vllm_rig/host/model_serve.py) for the other hosts of one run, and the run's token it asks of
# them (0600 on both sides, read through EnvironmentFile=; removed when the run's downloads are done).
MODEL_SERVE_UNIT = "vllm-rig-model-serve.service"
MODEL_PEER_TOKEN_FILE = f"{ETC_DIR}/model-peer.env"
MODELS_RECORD = f"{STATE_DIR}/models.json"  # the models served, newest first (model_catalogue.py)
HF_HOME = f"{STATE_DIR}/hf-home"  # the fetch's own HF_HOME: no token or cache from root's home is used
LOG_DIR = f"{STATE_DIR}/logs"
GPU_VERDICT = f"{STATE_DIR}/gpu-verdict.json"  # the last GPU verdict (vllm_rig/host/gpu_verdict.py --json-out)
# The service's last start check and watchdog run: JSON {"time", "ok", "check", "detail", "boot_id"}
# (+ "failures_in_row" for the watchdog). Absent: not installed on this host.
START_CHECK_RESULT = f"{STATE_DIR}/start-check.json"
WATCHDOG_RESULT = f"{STATE_DIR}/watchdog.json"
WATCHDOG_UNIT = "vllm-rig-watchdog"  # .service (one round) and .timer
# Stamps (vllm_rig/core/stamp.py): each holds the key of what was last done on the host, written only after
# it succeeded. All of them are read with one remote command per run, so every stamp is listed in STAMPS.
INITRAMFS_STAMP = f"{STATE_DIR}/initramfs-nouveau.stamp"  # the nouveau blacklist the initramfs was rebuilt for
HOST_FINGERPRINT = f"{STATE_DIR}/host-fingerprint"  # kernel and driver the JIT caches were made with
# The unit and environment file each runtime last served with (<dir>/<runtime name>/), saved when `current` leaves
# it, put back when a rollback returns to it: a runtime of the other kind needs its own flags.
SERVED_WITH_DIR = f"{STATE_DIR}/served-with"
SWITCHED_STAMP = f"{STATE_DIR}/runtime-switched"  # the runtime `current` was last switched to (deploy or rollback)
FLASHQLA_STAMP = f"{STATE_DIR}/flashqla-extension"  # the runtime whose FlashQLA extension is built
GPU_VERDICT_PROVEN = f"{STATE_DIR}/gpu-verdict-proven"  # what the GPU verdict last passed for
SERVICE_PROVEN = f"{STATE_DIR}/service-proven"  # what the service last answered a real completion for
STAMPS = (INITRAMFS_STAMP, HOST_FINGERPRINT, SWITCHED_STAMP, FLASHQLA_STAMP, GPU_VERDICT_PROVEN, SERVICE_PROVEN)
# Not a keyed stamp: its time says when vllm-rig last refreshed the apt lists (the lists' own fact reads it).
APT_LISTS_STAMP = f"{STATE_DIR}/apt-lists.stamp"
# The LAN proxy (stages/lan): nginx's site, the stock default site kept off, and the TLS files. The keys are
# root-only; nginx's master process (root) reads them and the key map at start and reload.
LAN_DIR = f"{ETC_DIR}/lan"
LAN_CA_CERT = f"{LAN_DIR}/ca.crt"  # what clients trust (local_ca); the deploy also copies it to lan-ca/<host>-ca.crt
LAN_CERT = f"{LAN_DIR}/server.crt"
LAN_KEY = f"{LAN_DIR}/server.key"
LAN_KEY_MAP = f"{LAN_DIR}/api-key.conf"  # nginx map: "Bearer <key>" -> the key's name, made on the host
# The clients' keys (api_keys, bin/rig keys): one root-only file per name holding the bare key, made on the box;
# a chat page on the box reads its own from KEYS_DIR/chat-page.
KEYS_DIR = f"{ETC_DIR}/keys"
LAN_ACCESS_LOG = "/var/log/nginx/vllm-rig-lan.access.log"  # names each request's key (never the key itself)
NGINX_SITE = "/etc/nginx/conf.d/vllm-rig-lan.conf"
# The front (stages/front, front_of): its nginx site, and per box the box's CA and key (root only).
FRONT_DIR = f"{ETC_DIR}/front"
FRONT_SITE = "/etc/nginx/conf.d/vllm-rig-front.conf"
NGINX_DEFAULT_SITE = "/etc/nginx/sites-enabled/default"  # Debian's postinst links the port-80 welcome page here


@dataclass(frozen=True)
class Layout:
    root: str
    service_name: str
    service_user: str

    @classmethod
    def of(cls, s: Settings) -> Layout:
        return cls(s.install_root, s.service_name, s.service_user)

    @property
    def current(self) -> str:
        return f"{self.root}/current"

    @property
    def venv_bin(self) -> str:
        return f"{self.current}/venv/bin"

    @property
    def python(self) -> str:
        return f"{self.venv_bin}/python"

    @property
    def fork_src(self) -> str:
        return f"{self.current}/src/vllm"

    @property
    def flashqla_src(self) -> str:
        return f"{self.current}/src/flashqla"

    @property
    def bin_dir(self) -> str:
        return f"{self.root}/bin"

    @property
    def tools_venv(self) -> str:
        return f"{self.root}/tools/venv"

    @property
    def tools_python(self) -> str:
        """The tools venv's python (huggingface_hub 2.x; the runtime venv cannot hold it)."""
        return f"{self.root}/tools/venv/bin/python"

    @property
    def host_package(self) -> str:
        """The host programs as one zip (vllm_rig/host/): `python3 <this> <program> [args]`."""
        return f"{self.bin_dir}/vllm-rig-host.pyz"

    @property
    def flashinfer_check(self) -> str:
        return f"{self.bin_dir}/{FLASHINFER_CHECK}"

    @property
    def env_file(self) -> str:
        return f"{ETC_DIR}/{self.service_name}.env"

    @property
    def environment_file(self) -> str:
        """The server's environment from settings (vllm_env too), root-only: the unit, which every user of the
        box can read, only names it."""
        return f"{ETC_DIR}/{self.service_name}-environment.env"

    @property
    def service_home(self) -> str:
        """The service user's home: its caches (HF, FlashInfer, Triton, torch extensions) live here."""
        return f"/var/lib/{self.service_user}"

    @property
    def torch_extensions_dir(self) -> str:
        return f"{self.service_home}/torch_extensions"

    @property
    def unit_path(self) -> str:
        return f"/etc/systemd/system/{self.service_name}.service"


@dataclass(frozen=True)
class RuntimeDirs:
    """Paths of one runtime (<install_root>/runtimes/<name>) and the shared places around it."""

    root: str
    name: str

    @property
    def runtimes(self) -> str:
        return f"{self.root}/runtimes"

    @property
    def dir(self) -> str:
        return f"{self.runtimes}/{self.name}"

    @property
    def fork(self) -> str:
        return f"{self.dir}/src/vllm"

    @property
    def flashqla(self) -> str:
        return f"{self.dir}/src/flashqla"

    @property
    def cutlass(self) -> str:
        return f"{self.dir}/src/deps/cutlass"

    @property
    def triton(self) -> str:
        return f"{self.dir}/src/deps/triton"

    def dep(self, name: str) -> str:
        """Checkout of a source the fork's CMake would fetch (fetchcontent_sources)."""
        return f"{self.dir}/src/deps/{name}"

    @property
    def fingerprint_file(self) -> str:
        return f"{self.dir}/fingerprint"

    @property
    def spec(self) -> str:
        return f"{self.dir}/build-spec.json"

    @property
    def marker(self) -> str:
        """Written last by the build, after every check passed: the runtime is complete."""
        return f"{self.dir}/runtime.json"

    @property
    def unit(self) -> str:
        return f"vllm-rig-build-{self.name}.service"

    @property
    def log(self) -> str:
        return f"{LOG_DIR}/build-{self.name}.log"

    @property
    def cache(self) -> str:
        return f"{self.root}/cache"

    @property
    def previous(self) -> str:
        return f"{self.root}/previous"

    @property
    def rollback_script(self) -> str:
        return rollback_script(self.root)


def rollback_script(root: str) -> str:
    """The rollback script under install_root (bin/rig rollback, and a failed first start's put-back, run it)."""
    return f"{root}/bin/vllm-rig-rollback"
