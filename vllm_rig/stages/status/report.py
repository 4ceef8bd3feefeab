"""The status view from the probe's raw output: every field filled, or marked unknown with the reason.

Pure functions (tests/unit/test_status_report.py): build() turns the probe's JSON, the host's settings and the last
read into {"host", "read_at", "sections": {section: {field: value or {"unknown": reason}}}, "gpus": [...],
"counters": {...}}; render_table() and render_json() print it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vllm_rig.host import gpu_facts, model_fetch, server_gone
from vllm_rig.host.server_client import metric_values
from vllm_rig.settings import Settings
from vllm_rig.stages.driver.facts import DriverState
from vllm_rig.stages.driver.reboot import reboot_reasons
from vllm_rig.stages.runtime.facts import parse_runtime_state

# vLLM's metric names on the fork's line (vLLM 0.21.0: vllm/v1/metrics/loggers.py, spec decode in
# vllm/v1/spec_decode/metrics.py). Counters are exposed with the _total suffix prometheus_client adds.
KV_USAGE = "vllm:kv_cache_usage_perc"  # gauge, 1 = 100 percent
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # tokens queried
PREFIX_HITS = "vllm:prefix_cache_hits_total"  # tokens found cached
GENERATED = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
COUNTERS = {"generated": GENERATED, "prompt": PROMPT, "drafted": DRAFTED, "accepted": ACCEPTED}
COUNTERS |= {"prefix_queries": PREFIX_QUERIES, "prefix_hits": PREFIX_HITS}
DRIVER_PACKAGES = ("nvidia-driver", "cuda-drivers", "nvidia-open", "nvidia-dkms")
# The live fields of a GPU (vllm_rig/host/gpu_facts.py Gpu), as the JSON names them.
GPU_KEYS: tuple[str, ...] = (
    "index",
    "name",
    "temperature_c",
    "power_draw_w",
    "power_limit_w",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
)
GPU_KEYS += ("memory_used_mib", "memory_mib")
SECTIONS = ("driver", "cuda", "runtime", "model", "service", "gpu verdict", "api", "metrics")


@dataclass(frozen=True)
class Unknown:
    reason: str


def _field(value: Any) -> Any:
    return {"unknown": value.reason} if isinstance(value, Unknown) else value


def _command(raw: dict, name: str) -> tuple[int, list[str]]:
    got = (raw.get("commands") or {}).get(name) or {"rc": 127, "out": ""}
    return int(got.get("rc", 127)), str(got.get("out") or "").splitlines()


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _when(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    return f"{hours}h {minutes}m {secs}s" if hours else f"{minutes}m {secs}s"


def _unix(value: str | None) -> float | None:
    """systemctl show --timestamp=unix: "@1733000000" (empty when never)."""
    if value and value.startswith("@"):
        try:
            return float(value[1:])
        except ValueError:
            return None
    return None


# ---- sections ------------------------------------------------------------------------------------------
def driver_section(raw: dict, s: Settings) -> dict[str, Any]:
    rc, lines = _command(raw, "driver")
    if rc != 0:
        why = Unknown(f"the driver state could not be read (exit {rc})")
        return {"installed": why, "held": why, "loaded": why, "reboot pending": why}
    state = DriverState().process(lines)
    pkgs = {n: v for n, v in state["packages"].items() if n.startswith(DRIVER_PACKAGES)}
    versions = sorted({v.split("-", 1)[0] for v in pkgs.values()})
    installed = versions[-1] if versions else None
    held = [n for n in state["holds"] if n.startswith(DRIVER_PACKAGES) or n.startswith(("libnvidia", "nvidia-"))]
    record = (raw.get("files") or {}).get("driver_record")
    reasons = reboot_reasons(state, installed) if installed else []
    return {
        "installed": installed or "none (no NVIDIA driver package)",
        "held": f"yes ({len(held)} packages)" if held else "no",
        "loaded": state["loaded_version"] or "none (nvidia.ko not loaded)",
        "reboot pending": ("yes: " + "; ".join(reasons)) if reasons else "no",
        "installed by vllm-rig": record.strip() if record else "no record (not installed by vllm-rig yet)",
        "settings ask for": s.nvidia_driver_version,
    }


def cuda_section(raw: dict, s: Settings) -> dict[str, Any]:
    _, driver_lines = _command(raw, "driver")
    packages = DriverState().process(driver_lines)["packages"] if driver_lines else {}
    toolkit = f"cuda-toolkit-{s.cuda_version.replace('.', '-')}"
    _, lines = _command(raw, "cuda")
    target = lines[0].strip() if lines and lines[0].strip() != "/usr/local/cuda" else None
    release = next((line.strip() for line in lines if "release" in line), None)
    return {
        "toolkit": f"{toolkit} {packages[toolkit]}" if toolkit in packages else f"{toolkit} not installed",
        "/usr/local/cuda": target or "absent",
        "nvcc": release or Unknown("no nvcc under /usr/local/cuda/bin"),
    }


def _runtime_line(name: str | None, info: Mapping[str, Any], built: dict) -> Any:
    if not name:
        return "none"
    rec = built.get(name) or {}
    fingerprint = (info.get("fingerprint") or rec.get("fingerprint") or "?")[:16]
    when = rec.get("built_at")
    vllm = (rec.get("versions") or {}).get("vllm")
    parts = [] if name.startswith(fingerprint) or fingerprint.startswith(name) else [f"fingerprint {fingerprint}"]
    parts.append(f"built {when}" if when else "not complete: no runtime.json")
    text = f"{name} ({', '.join(parts)}"
    text += f", vllm {vllm})" if vllm else ")"
    return text


def runtime_section(raw: dict) -> dict[str, Any]:
    rc, lines = _command(raw, "runtimes")
    if rc != 0:
        return {"current": Unknown(f"the runtimes could not be listed (exit {rc})")}
    state = parse_runtime_state(lines)
    files = raw.get("files") or {}
    built = {}
    for path, text in (files.get("runtime_json") or {}).items():
        built[path.rsplit("/", 2)[-2]] = _json(text) or {}
    steps = {path.rsplit("/", 3)[-3]: _json(text) or {} for path, text in (files.get("build_status") or {}).items()}
    runtimes = state["runtimes"]
    building = []
    for name, info in runtimes.items():
        if info["building"]:
            step = steps.get(name, {})
            building.append(
                f"{name} ({step.get('state', 'starting')}{', step ' + step['step'] if 'step' in step else ''})"
            )
    return {
        "current": _runtime_line(state["current"], runtimes.get(state["current"] or "", {}), built),
        "previous": _runtime_line(state["previous"], runtimes.get(state["previous"] or "", {}), built),
        "building": ", ".join(building) or "no",
    }


def model_section(raw: dict, s: Settings) -> dict[str, Any]:
    files = raw.get("files") or {}
    marker = _json(files.get("model_marker"))
    _, unit = _command(raw, "fetch_unit")
    fetching = any(line.strip() in ("ActiveState=active", "ActiveState=activating") for line in unit)
    progress = _json(files.get("fetch_status"))
    out: dict[str, Any] = {"settings ask for": f"{s.model_repo}@{s.model_revision}"}
    if marker:
        out["on disk"] = f"{marker.get('repo')}@{(marker.get('commit') or '')[:12]} (revision {marker.get('revision')})"
        ok = model_fetch.marker_matches(marker, s.model_repo, s.model_revision)
        out["verified"] = (
            f"yes: every file's sha256, {marker.get('completed_at')}" if ok else "no: the checkpoint on disk is another"
        )
    else:
        out["on disk"] = f"none complete in {s.model_dir}"
        out["verified"] = "no: no completion marker"
    if fetching and isinstance(progress, dict):
        out["download"] = model_fetch.status_line(progress)
    else:
        out["download"] = "running" if fetching else "not running"
    return out


def _result_file(text: str | None, what: str) -> Any:
    """A start-check or watchdog result, JSON {"time", "ok", "check", "detail", "boot_id"}."""
    if text is None:
        return "not installed"
    data = _json(text)
    if not isinstance(data, dict):
        return Unknown(f"the {what} result is not JSON")
    line = "ok" if data.get("ok") else "FAILED"
    if data.get("time"):
        line += f" at {data['time']}"
    # A passing result names no failing check: print only the parts that are there, never "None".
    said = [str(data[key]) for key in ("check", "detail") if data.get(key)]
    if len(said) == 2:
        line += f": {said[0]} ({said[1]})"
    elif said:
        line += f": {said[0]}"
    if "failures_in_row" in data:
        line += f", failures in a row {data['failures_in_row']}"
    return line


# systemd's timespan units (`systemctl show` prints a *USec timespan as "1min 52.345s").
TIMESPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _timespan(text: str) -> float | None:
    """Seconds of a systemd timespan ("1min 52.345s", "2h 3min", "0"); None when it is not one."""
    text = text.strip()
    if text in ("0", ""):
        return 0.0 if text else None
    total = 0.0
    for word in text.split():
        number = word.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = word[len(number) :]
        if unit not in TIMESPAN_UNITS:
            return None
        try:
            total += float(number) * TIMESPAN_UNITS[unit]
        except ValueError:
            return None
    return total


def timer_first_check(raw: dict) -> str | None:
    """ "installed, first check at HH:MM UTC" for a watchdog timer that is loaded and active but has never fired;
    "installed, first check pending" when its next time cannot be read; None otherwise (not loaded, or it ran)."""
    rc, lines = _command(raw, "watchdog_timer")
    props = dict(line.partition("=")[::2] for line in lines if "=" in line)
    if props.get("LoadState") != "loaded" or props.get("ActiveState") != "active":
        return None
    if _unix(props.get("LastTriggerUSec")):
        return None  # it has run: what it found is in its result file
    when = _unix(props.get("NextElapseUSecRealtime"))
    mono, uptime = _timespan(props.get("NextElapseUSecMonotonic", "")), props.get("Uptime", "")
    if not when and mono and uptime.replace(".", "", 1).isdigit() and props.get("Now", "").isdigit():
        when = float(props["Now"]) - float(uptime) + mono  # boot time + the timer's time since boot
    if not when:
        return "installed, first check pending"
    return f"installed, first check at {datetime.datetime.fromtimestamp(when, datetime.UTC):%H:%M} UTC"


def service_section(raw: dict, s: Settings) -> dict[str, Any]:
    rc, lines = _command(raw, "service")
    props = dict(line.partition("=")[::2] for line in lines if "=" in line)
    files = raw.get("files") or {}
    out: dict[str, Any] = {}
    if rc != 0 or not props:
        why = Unknown(f"systemctl show did not answer (exit {rc})")
        out |= {"state": why, "uptime": why, "restarts since boot": why}
    elif props.get("LoadState") == "not-found":
        out["state"] = f"not installed ({s.service_name}.service not found)"
        out |= {"uptime": "not installed", "restarts since boot": "not installed"}
    else:
        out["state"] = f"{props.get('ActiveState')} ({props.get('SubState')})"
        since = _unix(props.get("ActiveEnterTimestamp"))
        if props.get("ActiveState") == "active" and since:
            out["uptime"] = f"{_duration(raw['time'] - since)} (since {_when(since)})"
        else:
            out["uptime"] = "not running"
        out["restarts since boot"] = (
            int(props["NRestarts"])
            if props.get("NRestarts", "").isdigit()
            else Unknown("no NRestarts (systemd older than 235)")
        )
    out["last start check"] = _result_file(files.get("start_check"), "start check")
    if stale_start_check(files.get("start_check"), _unix(props.get("ExecMainStartTimestamp"))):
        out["last start check"] = f"stale (from before the current start): {out['last start check']}"
    waiting = timer_first_check(raw) if files.get("watchdog") is None else None
    out["watchdog"] = waiting or _result_file(files.get("watchdog"), "watchdog")
    return out


def stale_start_check(text: str | None, main_started: float | None) -> bool:
    """The start check's result is from an earlier start than the server's current one (a server that died
    before its start check wrote anything leaves the previous start's "ok")."""
    data = _json(text)
    if not isinstance(data, dict) or not data.get("time") or not main_started:
        return False
    try:
        written = datetime.datetime.fromisoformat(str(data["time"]).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return written < main_started


def headline(raw: dict, s: Settings, url: str) -> str:
    """The first line of a box's status: "serving MODEL at URL", or "NOT SERVING: why", from systemd's state of
    the service, the server's own error line in its journal, and whether /v1/models lists the model."""
    if "error" in raw:
        return f"NOT SERVING? the box could not be read: {raw['error']}"
    rc, lines = _command(raw, "service")
    props = server_gone.parse_show("\n".join(lines))
    _, journal = _command(raw, "journal")
    said = server_gone.why("\n".join(journal))
    got = (raw.get("http") or {}).get("api") or {}
    models = [m.get("id") for m in (_json(got.get("body")) or {}).get("data") or []] if got.get("status") == 200 else []
    if rc != 0 or not props:
        return f"NOT SERVING? systemctl show did not answer (exit {rc})"
    if props.get("LoadState") == "not-found":
        return f"NOT SERVING: the service is not installed ({s.service_name}.service; bin/rig deploy installs it)"
    if props.get("ActiveState") == "active" and s.served_model_name in models:
        return f"serving {s.served_model_name} at {url}"
    gone = server_gone.gone(props)
    if gone:
        return f"NOT SERVING: {server_gone.one_line(gone, chr(10).join(journal))}"
    state = f"{props.get('ActiveState')} ({props.get('SubState')})"
    if props.get("ActiveState") == "activating":
        return f"NOT SERVING yet: starting, {state}" + (f"; last error line: {said}" if said else "")
    if props.get("ActiveState") == "active":
        answer = f"HTTP {got['status']}" if "status" in got else got.get("error", "no answer")
        listed = f"lists {', '.join(map(str, models))}" if models else f"answers {answer}"
        return f"NOT SERVING: the service runs but /v1/models {listed}, not {s.served_model_name}"
    return f"NOT SERVING: the service is {state}" + (f": {said}" if said else "")


def verdict_section(raw: dict) -> dict[str, Any]:
    data = _json((raw.get("files") or {}).get("verdict"))
    if data is None:
        return {"last": "none yet (the verify stage has not run)"}
    _, mtime = _command(raw, "verdict_mtime")
    when = _when(float(mtime[0])) if mtime and mtime[0].strip().isdigit() else None
    failed = [g.get("name", "?") for g in data.get("gates") or [] if g.get("result") == "fail"]
    line = f"{data.get('verdict')}" + (f" at {when}" if when else "")
    if failed:
        line += f"; failed gates: {', '.join(failed)}"
    if data.get("problems"):
        line += f"; problems: {'; '.join(data['problems'])}"
    return {"last": line}


def gpu_rows(raw: dict) -> list[dict[str, Any]] | Unknown:
    rc, lines = _command(raw, "gpus")
    facts = gpu_facts.parse("\n".join(lines), rc)
    if facts.error:
        loaded = " (a reboot loads the installed driver)" if facts.error.mismatch else ""
        return Unknown(f"nvidia-smi: {facts.error.message}{loaded}")
    if facts.problem:
        return Unknown(f"nvidia-smi's output not understood: {facts.problem}")
    return [{k: v for k, v in asdict(gpu).items() if k in GPU_KEYS} for gpu in facts.gpus]


def api_section(raw: dict, s: Settings) -> dict[str, Any]:
    got = (raw.get("http") or {}).get("api") or {}
    if "error" in got:
        return {"answers": f"no: {got['error']}"}
    status = got.get("status")
    keyed = "with the key" if got.get("key_sent") else "without a key (none configured)"
    if status == 200:
        models = [m.get("id") for m in (_json(got.get("body")) or {}).get("data") or []]
        return {"answers": f"yes, {keyed}: {', '.join(map(str, models)) or 'no model listed'}"}
    return {"answers": f"no: HTTP {status} {keyed}"}


def chat_page_section(raw: dict, s: Settings, url: str) -> dict[str, Any]:
    """Whether the chat page (chat_page: true) answers its /health on loopback, and where the LAN opens it."""
    got = (raw.get("http") or {}).get("chat_page") or {}
    where = chat_page_url(url, s)
    if "error" in got:
        return {"answers": f"no: {got['error']} (sudo journalctl -u vllm-rig-chat-page on the box)"}
    if got.get("status") == 200:
        return {"answers": f"yes, at {where}" if where else "yes"}
    return {"answers": f"no: HTTP {got.get('status')} (sudo journalctl -u vllm-rig-chat-page on the box)"}


def chat_page_url(url: str, s: Settings) -> str:
    """The clients' URL (https://box:lan_port/v1) with the chat page's port, or "" when there is none."""
    head, sep, _ = url.rpartition(":")
    return f"{head}:{s.chat_page_port}/" if sep and head.startswith("https://") else ""


# ---- /metrics --------------------------------------------------------------------------------------------
def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def metrics_section(raw: dict, previous: dict | None, service_since: float | None) -> tuple[dict[str, Any], dict]:
    got = (raw.get("http") or {}).get("metrics") or {}
    if "error" in got or got.get("status") != 200:
        why = Unknown(f"/metrics does not answer: {got.get('error') or 'HTTP ' + str(got.get('status'))}")
        return {k: why for k in ("KV cache usage", "prefix cache hit rate", "MTP acceptance", "tokens/s")}, {}
    try:
        values = metric_values(got.get("body") or "")
    except ValueError as err:
        why = Unknown(f"/metrics is not Prometheus text: {err}")
        return {k: why for k in ("KV cache usage", "prefix cache hit rate", "MTP acceptance", "tokens/s")}, {}
    counters = {key: sum(values[name]) for key, name in COUNTERS.items() if name in values}
    read = {"time": raw["time"], "service_since": service_since, "counters": counters}
    out: dict[str, Any] = {}
    kv = values.get(KV_USAGE)
    out["KV cache usage"] = f"{100 * max(kv):.1f}%" if kv else Unknown(f"the server exports no {KV_USAGE}")
    out["prefix cache hit rate"] = _rate_text(
        counters, previous, "prefix_hits", "prefix_queries", "no prefix-cache query yet", PREFIX_QUERIES
    )
    out["MTP acceptance"] = _rate_text(counters, previous, "accepted", "drafted", "no draft token yet", DRAFTED)
    out["tokens/s"] = _throughput(read, previous)
    return out, read


def _since_last(read_counters: dict, previous: dict | None, key: str) -> float | None:
    if not previous or key not in read_counters or key not in (previous.get("counters") or {}):
        return None
    return read_counters[key] - previous["counters"][key]


def _rate_text(counters: dict, previous: dict | None, num: str, den: str, none_yet: str, name: str) -> Any:
    if den not in counters:
        return Unknown(f"the server exports no {name}")
    total = _ratio(counters.get(num), counters[den])
    if total is None:
        return Unknown(none_yet)
    text = f"{100 * total:.1f}% since the server started"
    recent = _ratio(_since_last(counters, previous, num), _since_last(counters, previous, den))
    if recent is not None and recent >= 0:
        text += f", {100 * recent:.1f}% since the last read"
    return text


def _throughput(read: dict, previous: dict | None) -> Any:
    if "generated" not in read["counters"]:
        return Unknown(f"the server exports no {GENERATED}")
    if not previous or "generated" not in (previous.get("counters") or {}):
        return Unknown("first read: run status again for tokens/s since this one")
    if previous.get("service_since") != read["service_since"]:
        return Unknown("the server restarted since the last read")
    elapsed = read["time"] - previous["time"]
    generated = read["counters"]["generated"] - previous["counters"]["generated"]
    if elapsed <= 0 or generated < 0:
        return Unknown("the counters went back since the last read (a restart)")
    prompt = read["counters"].get("prompt", 0.0) - previous["counters"].get("prompt", 0.0)
    return f"{generated / elapsed:.1f} generated, {prompt / elapsed:.1f} prompt over the last {_duration(elapsed)}"


# ---- the clients' keys (lan_serving: proxy) ------------------------------------------------------------------
def keys_listing(raw: dict) -> dict | None:
    """lan_keys list's JSON from the probe, or None (direct serving, or the host programs not there yet)."""
    rc, lines = _command(raw, "keys")
    if rc != 0 or not lines:
        return None
    data = _json(lines[-1])
    return data if isinstance(data, dict) and "keys" in data else None


def keys_section(raw: dict) -> dict[str, Any]:
    """Requests per key name since the last read (this or bin/rig keys list); never a key."""
    found = keys_listing(raw)
    if found is None:
        return {"requests": Unknown("no key listing on this box (deploy it first)")}
    since = found.get("since") or 0
    window = f"since {_when(since)}" if since else "in nginx's log"
    counts = {name: info.get("requests", 0) for name, info in sorted((found.get("keys") or {}).items())}
    counts |= {"server": found.get("server", 0), "no key": found.get("without_key", 0)}
    return {"requests " + window: ", ".join(f"{name} {n}" for name, n in counts.items())}


# ---- the whole view ---------------------------------------------------------------------------------------
def build(host_name: str, raw: dict, s: Settings, previous: dict | None, url: str = "") -> dict[str, Any]:
    """`url`: where clients reach the box (the summary's client_url), for the headline."""
    if "error" in raw:
        why = Unknown(raw["error"])
        sections = {name: {"all": why} for name in SECTIONS}
        return _shape(host_name, None, sections, why, {}) | {"headline": headline(raw, s, url)}
    service = service_section(raw, s)
    _, lines = _command(raw, "service")
    props = dict(line.partition("=")[::2] for line in lines if "=" in line)
    metrics, read = metrics_section(raw, previous, _unix(props.get("ActiveEnterTimestamp")))
    sections = {
        "driver": driver_section(raw, s),
        "cuda": cuda_section(raw, s),
        "runtime": runtime_section(raw),
        "model": model_section(raw, s),
        "service": service,
        "gpu verdict": verdict_section(raw),
        "api": api_section(raw, s),
        "metrics": metrics,
    }
    if "keys" in (raw.get("commands") or {}):
        sections["keys"] = keys_section(raw)
    if s.chat_page:
        sections["chat page"] = chat_page_section(raw, s, url)
    return _shape(host_name, raw["time"], sections, gpu_rows(raw), read) | {"headline": headline(raw, s, url)}


def _shape(host_name: str, at: float | None, sections: dict, gpus: Any, read: dict) -> dict[str, Any]:
    return {
        "host": host_name,
        "read_at": _when(at),
        "sections": {name: {k: _field(v) for k, v in fields.items()} for name, fields in sections.items()},
        "gpus": _field(gpus),
        "last_read": read,
    }


def _text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"unknown"}:
        return f"unknown: {value['unknown']}"
    return str(value)


def _gpu_line(g: dict[str, Any]) -> str:
    def num(key: str, unit: str, fmt: str = "{:.0f}") -> str:
        return "?" + unit if g.get(key) is None else fmt.format(g[key]) + unit

    return (
        f"GPU{g.get('index')} {g.get('name')}: {num('temperature_c', ' C')}, "
        f"{num('power_draw_w', ' W')} of {num('power_limit_w', ' W')}, "
        f"SM {num('sm_clock_mhz', ' MHz')} (max {num('sm_clock_max_mhz', ' MHz')}), "
        f"memory {num('memory_used_mib', ' MiB')} of {num('memory_mib', ' MiB')}"
    )


def render_table(status: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    for section, fields in status["sections"].items():
        for i, (name, value) in enumerate(fields.items()):
            rows.append((section if i == 0 else "", name, _text(value)))
    gpus = status["gpus"]
    if isinstance(gpus, list):
        rows += [("gpus" if i == 0 else "", f"GPU{g.get('index')}", _gpu_line(g)) for i, g in enumerate(gpus)]
        if not gpus:
            rows.append(("gpus", "", "none listed"))
    else:
        rows.append(("gpus", "", _text(gpus)))
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    lines = [f"{status['host']}: {status['headline']}"] if status.get("headline") else []
    lines += [f"status of {status['host']} at {status['read_at'] or 'unknown'}"]
    lines += [f"  {a.ljust(w0)}  {b.ljust(w1)}  {c}".rstrip() for a, b, c in rows]
    return "\n".join(lines)


def render_json(status: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in status.items() if k != "last_read"}, sort_keys=True)
