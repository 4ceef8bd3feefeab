#!/usr/bin/env python3
"""The runtime build program: `python3 vllm-rig-host.pyz build_runtime <runtime>/build-spec.json`, run by the
deploy as a transient systemd unit (a dropped SSH session does not stop it). It picks the build of the spec's
kind and runs it, leaving <runtime>/.build/status.json for the deploy to read.

The kinds, one class each: the fork (runtime_build.Build, whose module also holds the steps every kind shares),
vLLM's release wheel with the SM75 patch (upstream_build.UpstreamBuild) and its source archive compiled
(upstream_compile.UpstreamCompileBuild). A new kind is one class and one row of KINDS; no module of a kind
imports another kind's or this one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .runtime_build import Build, BuildError, say
from .upstream_build import UpstreamBuild
from .upstream_compile import UpstreamCompileBuild

KINDS: dict[str, type[Build]] = {
    "fork": Build,
    "upstream-wheel": UpstreamBuild,
    "upstream-compile": UpstreamCompileBuild,
}


def build_for(spec: dict) -> Build:
    """The build of the spec's kind (a spec without one is the fork's, as the deploy wrote them before kinds)."""
    kind = spec.get("kind", "fork")
    if kind not in KINDS:
        raise BuildError(f"runtime kind {kind!r} is not one this host program builds ({', '.join(KINDS)})")
    return KINDS[kind](spec)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {Path(argv[0]).name} <runtime>/build-spec.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    try:
        build = build_for(spec)
    except BuildError as err:
        say(f"BUILD FAILED: {err}")
        return 1
    invocation = os.environ.get("INVOCATION_ID")
    say(f"BUILD START {spec['name']} (fingerprint {spec['fingerprint'][:16]}, invocation {invocation})")
    try:
        build.run()
    except BuildError as err:
        build.status("failed", error=str(err))
        say(f"BUILD FAILED: {err}")
        return 1
    except Exception as err:  # an unexpected failure still leaves a status the deploy can show
        build.status("failed", error=f"{type(err).__name__}: {err}")
        say(f"BUILD FAILED: {type(err).__name__}: {err}")
        raise
    build.status("done")
    say(f"BUILD OK {spec['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
