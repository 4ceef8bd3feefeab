#!/usr/bin/env python3
"""The models a host has served, newest first, and the removal of the older ones. `list` is stdlib only
(system python3); `served` and `remove` run with the tools venv's python (huggingface_hub removes revisions).

    vllm-rig-host.pyz model_catalogue list   --record F
    vllm-rig-host.pyz model_catalogue served --record F --name N --repo R --revision REV --dir D --keep K --unit-file U
    vllm-rig-host.pyz model_catalogue remove --record F --dir D --unit-file U

`served` (run after the service proved the model) puts the model first in the record, keeps the K models
served before it and removes the older ones from disk, printing the space each freed. `remove` removes one
model by its directory. Neither ever removes the model the service serves: the directory in the unit's
`--model`, the one the running server was started with (its /proc cmdline), and the one being recorded as
served are refused, with exit code 3.

What a model is on disk (vllm_rig/host/model_fetch.py's layout): DIR, a symlink to its snapshot in
huggingface_hub's cache beside it, and DIR's lock, status and peer files. Those are removed, and the snapshot
through the library (scan_cache_dir().delete_revisions(): it keeps the blobs another revision uses, and says
the space freed) unless another model directory points to it. DIR.rev-*/DIR.partial-* (the layout before the
cache, on a box not fetched since) go too; a DIR.replaced-* (a hand-made download model_fetch moved aside) is
kept and named.

Exit codes: 0 done, 1 usage or I/O error, 3 refused (the model serves).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .model_fetch import delete_snapshot
from .units import human

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_SERVES = 3
MODEL_FLAG = re.compile(r"""--model(?:=|\s+)(?:"([^"]+)"|'([^']+)'|(\S+))""")


class Refused(Exception):
    """Removing this model would take away what the service serves."""


def read_record(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except ValueError:
        print(f"model_catalogue: {path} is not JSON; starting a new record", file=sys.stderr)
        return []
    return [e for e in data.get("models", []) if isinstance(e, dict) and isinstance(e.get("dir"), str)]


def write_record(path: Path, models: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"models": models}, indent=1) + "\n")
    tmp.replace(path)


def model_paths(directory: str) -> list[Path]:
    """What model_fetch made for DIR beside the cache: the link, the old layout, lock, status and peer files."""
    dest = Path(directory)
    parent, name = dest.parent, dest.name
    found = [dest] if dest.is_symlink() or dest.exists() else []
    found += sorted(parent.glob(f"{name}.rev-*")) + sorted(parent.glob(f"{name}.partial-*"))
    beside = (f".{name}.fetch.lock", f".{name}.fetch-status.json", f".{name}.peer")
    return found + [parent / p for p in beside if (parent / p).exists()]


def present(directory: str) -> bool:
    return any(p.name != f".{Path(directory).name}.fetch.lock" for p in model_paths(directory))


def unit_model(unit_file: Path) -> str | None:
    """The --model path in the unit's ExecStart (None without a unit)."""
    try:
        text = unit_file.read_text()
    except OSError:
        return None
    match = MODEL_FLAG.search(text)
    return next(g for g in match.groups() if g) if match else None


def running_model(unit_file: Path) -> str | None:
    """The --model the service's running main process was started with (None when it does not run)."""
    unit = unit_file.name
    try:
        pid = subprocess.run(
            ["systemctl", "show", unit, "-p", "MainPID", "--value"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0") if pid and pid != "0" else []
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    words = [w.decode(errors="replace") for w in argv]
    for i, word in enumerate(words):
        if word == "--model" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--model="):
            return word.split("=", 1)[1]
    return None


def same_model(a: str, b: str) -> bool:
    """Two paths name one model: equal, or one resolves to the other's snapshot."""
    pa, pb = Path(a), Path(b)
    return pa == pb or pa.resolve() == pb.resolve()


def serving_dirs(unit_file: Path, also: list[str]) -> list[str]:
    return [d for d in (unit_model(unit_file), running_model(unit_file), *also) if d]


def refuse_if_serving(directory: str, serving: list[str]) -> None:
    for path in serving:
        if same_model(directory, path):
            raise Refused(f"{directory} is the model the service serves ({path}); switch to another model first")


def remove_model(entry: dict[str, Any], serving: list[str]) -> int:
    """Remove one model's files; returns bytes freed. Raises Refused for the served one."""
    directory = entry["dir"]
    refuse_if_serving(directory, serving)
    snapshot = Path(directory).resolve()
    freed = 0
    for path in model_paths(directory):
        if path.is_dir() and not path.is_symlink():
            # The layout before the cache: its blocks are freed where no other file links to them.
            freed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.stat().st_nlink == 1)
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    freed += delete_snapshot(snapshot)
    name = f"{entry.get('name') or directory} ({entry.get('repo', '?')}@{entry.get('revision', '?')})"
    print(f"model_catalogue: removed {name} from {directory}: {human(freed)} freed")
    kept = sorted(Path(directory).parent.glob(f"{Path(directory).name}.replaced-*"))
    if kept:
        print(f"model_catalogue: kept {', '.join(p.name for p in kept)} (a hand-made download; remove it by hand)")
    return freed


def cmd_list(args: argparse.Namespace) -> int:
    models = read_record(Path(args.record))
    print(json.dumps({"models": [{**m, "present": present(m["dir"])} for m in models]}))
    return EXIT_OK


def cmd_served(args: argparse.Namespace) -> int:
    record = Path(args.record)
    current = {"name": args.name, "repo": args.repo, "revision": args.revision, "dir": args.dir}
    before = [m for m in read_record(record) if not same_model(m["dir"], args.dir)]
    serving = serving_dirs(Path(args.unit_file), [args.dir])
    kept: list[dict[str, Any]] = []
    freed = 0
    for entry in before:
        if not present(entry["dir"]):
            continue  # removed by hand: forget it
        if len(kept) < args.keep:
            kept.append(entry)
            continue
        try:
            freed += remove_model(entry, serving)
        except Refused as err:
            print(f"model_catalogue: not removed: {err}")
            kept.append(entry)
    write_record(record, [current, *kept])
    print(
        f"model_catalogue: serving {args.name} ({args.repo}@{args.revision}); kept "
        f"{', '.join(m.get('name') or m['dir'] for m in kept) or 'no other model'} (models_keep={args.keep})"
        + (f"; {human(freed)} freed" if freed else "")
    )
    return EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    record = Path(args.record)
    models = read_record(record)
    entry = next((m for m in models if same_model(m["dir"], args.dir)), {"dir": args.dir})
    try:
        remove_model(entry, serving_dirs(Path(args.unit_file), []))
    except Refused as err:
        print(f"model_catalogue: refused: {err}", file=sys.stderr)
        return EXIT_SERVES
    write_record(record, [m for m in models if not same_model(m["dir"], args.dir)])
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="model_catalogue.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--record", required=True)
    served = sub.add_parser("served")
    for name in ("--record", "--name", "--repo", "--revision", "--dir", "--unit-file"):
        served.add_argument(name, required=True)
    served.add_argument("--keep", type=int, required=True)
    remove = sub.add_parser("remove")
    for name in ("--record", "--dir", "--unit-file"):
        remove.add_argument(name, required=True)
    args = p.parse_args(argv)
    try:
        return {"list": cmd_list, "served": cmd_served, "remove": cmd_remove}[args.command](args)
    except OSError as err:
        print(f"model_catalogue: {err}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
