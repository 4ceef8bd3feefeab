"""The hostile artifacts of tests/hostile_artifacts.py installed on the sandbox host (Debian 12: Python 3.11.2,
which has no tar extraction filters) as root, by vllm_rig/host/runtime_artifact.py from the host zip the deploy
uploads: each refused with its line, nothing outside the runtime changed, nothing left inside."""

from __future__ import annotations

import json
import re
import shutil

from tests import host_scripts
from tests import hostile_artifacts as h
from tests.conftest import Rig

BASE = "/var/tmp/hostile-artifacts"
SCRIPT = f"""
import json, sys
sys.path.insert(0, "{BASE}/host.pyz")
from vllm_rig.host import runtime_artifact as ra
from pathlib import Path
out = {{"python": sys.version.split()[0]}}
for case in json.loads(sys.argv[1]):
    root = Path("{BASE}") / case
    try:
        ra.install(root / "{h.RUNTIME}", "{h.FP}", root / "store")
        out[case] = "installed"
    except Exception as err:  # the old install() failed with others too; the test says which
        out[case] = type(err).__name__ + ": " + str(err)
print(json.dumps(out))
"""


def test_every_hostile_artifact_is_refused_on_the_hosts_python_as_root(rig: Rig) -> None:
    machine = rig.machine("rig1")
    base = machine.dir / BASE.lstrip("/")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    shutil.copy(host_scripts.package(), base / "host.pyz")
    cases = {f"case{i}": name for i, name in enumerate(sorted(h.REFUSED))}
    cases["good"] = "good"
    before = {}
    for key, name in cases.items():
        local = base / key
        h.make_box(local)
        h.make_store(local, f"{BASE}/{key}", h.good if name == "good" else h.REFUSED[name][0])
        before[key] = h.snapshot(local)
    (base / "run.py").write_text(SCRIPT)
    argument = json.dumps(sorted(cases)).replace("'", "")
    out = json.loads(rig.ssh("rig1", f"sudo python3 {BASE}/run.py '{argument}'"))
    assert out.pop("python") == "3.11.2"  # Debian 12's: no tarfile filters
    problems = []  # every case's, not the first only: the report of a regression names them all
    runtime = base / "good" / h.RUNTIME
    if out.pop("good") != "installed" or (runtime / "venv" / "bin" / "tool").stat().st_mode & 0o7000:
        problems.append("the good artifact is not installed, or with its setuid bit")
    for key, said in out.items():
        name = cases[key]
        if not said.startswith("ArtifactError: ") or not re.search(h.REFUSED[name][1], said):
            problems.append(f"{name}: {said}")
        if h.snapshot(base / key) != before[key]:
            problems.append(f"{name}: the box changed")
    assert not problems, "\n".join(problems)
    shutil.rmtree(base)
