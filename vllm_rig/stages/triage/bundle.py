"""What goes into a triage bundle: the parts read on the host (vllm_rig/host/triage.py reads them) and those made
here (the settings with secrets redacted, the preflight verdict, the status view)."""

from __future__ import annotations

import io
import json
import os
import shlex
import tarfile
from pathlib import Path
from typing import Any

from vllm_rig.host import triage
from vllm_rig.host.model_fetch import MARKER as MODEL_MARKER
from vllm_rig.paths import GPU_VERDICT, HF_TOKEN_FILE, LOG_DIR, MODEL_PEER_TOKEN_FILE, Layout
from vllm_rig.settings import SECRET_ENV_NAME, SECRET_KEYS, Settings

REDACTED = "<redacted>"
# The kernel's NVIDIA lines: the driver (NVRM), Xid errors, and modules that did not load.
KERNEL_PATTERN = "nvidia|nvrm|xid|nouveau"


def redacted_settings(s: Settings) -> dict[str, Any]:
    """Every setting, with the secrets (SECRET_KEYS) replaced by <redacted> when set, and whatever has a
    secret's shape anywhere else (a vllm_env value of a secret-looking name, --api-key's value, a URL's
    user:password) redacted as the host redacts it."""
    data = s.model_dump(mode="json")
    for key in SECRET_KEYS:
        if data.get(key) is not None:
            data[key] = REDACTED
    data["vllm_env"] = {
        name: REDACTED if SECRET_ENV_NAME.search(name) else value
        for name, value in (data.get("vllm_env") or {}).items()
    }
    return json.loads(triage.redact(json.dumps(data), {})[0])


def control_secrets(s: Settings) -> dict[str, str]:
    """The secrets only the control machine holds (the store's password, the MOK password): never sent to the
    host, so the bundle is redacted of them here, once fetched (they should not be in it: belt and braces)."""
    values = {
        "runtime_artifact_store_auth": s.runtime_artifact_store_auth,
        "secure_boot_mok_password": s.secure_boot_mok_password,
    }
    return {v: k for k, v in values.items() if v and len(v) >= triage.MIN_SECRET}


def redact_fetched(path: Path, secrets: dict[str, str]) -> int:
    """Rewrite the fetched archive with `secrets` redacted in every member; how many values were found."""
    if not secrets:
        return 0
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]  # type: ignore[union-attr]
    count = 0
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as out:
        for info, data in members:
            text, hits = triage.redact(data.decode(errors="replace"), secrets)
            count += hits
            clean = text.encode() if hits else data
            info.size = len(clean)
            out.addfile(info, io.BytesIO(clean))
    tmp.chmod(0o600)
    os.replace(tmp, path)
    return count


def host_parts(s: Settings) -> dict[str, dict[str, str]]:
    layout = Layout.of(s)
    n = s.triage_journal_lines
    unit = f"{s.service_name}.service"
    fork, flashqla = shlex.quote(layout.fork_src), shlex.quote(layout.flashqla_src)
    driver = (
        "cat /proc/driver/nvidia/version; echo; nvidia-smi; echo; "
        "dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'cuda-drivers*' 'dkms' 2>/dev/null; dkms status 2>&1"
    )
    commits = (
        f"echo fork; git -C {fork} log -1 --format='%H %cI %s' 2>&1; git -C {fork} describe --tags --always 2>&1; "
        f"echo flashqla; git -C {flashqla} log -1 --format='%H %cI %s' 2>&1; "
        f"echo current; readlink {shlex.quote(layout.current)}; "
        f"echo previous; readlink {shlex.quote(layout.root)}/previous"
    )
    build_log = (
        f'f=$(ls -t {LOG_DIR}/build-*.log 2>/dev/null | head -n 1); [ -n "$f" ] && echo "$f" && tail -n {n} "$f"'
    )
    kernel = (
        f"lines=$( (journalctl -k -b --no-pager -o short-monotonic 2>/dev/null || dmesg 2>&1) "
        f"| grep -iE '{KERNEL_PATTERN}' | tail -n {n}); "
        '[ -n "$lines" ] && echo "$lines" || echo "(no NVIDIA lines in this boot\'s kernel log)"'
    )
    return {
        "gpu-verdict.json": {"file": GPU_VERDICT},
        "versions/driver.txt": {"command": driver},
        "versions/cuda.txt": {"command": "readlink -f /usr/local/cuda; /usr/local/cuda/bin/nvcc --version"},
        "versions/pip-freeze.txt": {"command": f"{shlex.quote(layout.python)} -m pip freeze --all"},
        "versions/commits.txt": {"command": commits},
        "versions/runtime.json": {"file": f"{layout.current}/runtime.json"},
        "model/marker.json": {"file": f"{s.model_dir}/{MODEL_MARKER}"},
        "unit/service.txt": {"command": f"systemctl cat {unit}; systemctl status --no-pager {unit}"},
        "journal/service.txt": {"command": f"journalctl -u {unit} -n {n} --no-pager"},
        "journal/build.txt": {"command": f"journalctl -u 'vllm-rig-build-*' -n {n} --no-pager"},
        "journal/build-log.txt": {"command": build_log},
        "kernel/nvidia.txt": {"command": kernel},
    }


def spec(s: Settings, out: str, top: str, given: dict[str, str]) -> dict[str, Any]:
    return {
        "out": out,
        "top": top,
        "parts": host_parts(s),
        "given": given,
        "secret_files": [Layout.of(s).env_file, Layout.of(s).environment_file, HF_TOKEN_FILE, MODEL_PEER_TOKEN_FILE],
        "secrets": [s.hf_token] if s.hf_token else [],  # the host has it anyway; control-side ones stay here
    }


def given_parts(s: Settings, preflight_json: str, status: dict[str, Any]) -> dict[str, str]:
    return {
        "settings.json": json.dumps(redacted_settings(s), indent=1, sort_keys=True) + "\n",
        "preflight.json": preflight_json + "\n",
        "status.json": json.dumps(status, indent=1, sort_keys=True) + "\n",
    }
