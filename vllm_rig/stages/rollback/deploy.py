"""Rollback (on demand): the runtime stage's rollback script on each host, its output printed: it swaps
`current` and `previous`, marks the runtime left behind as rolled back (the next deploy does not switch back
to it unless told), puts back the unit and environment the runtime returned to served with (a runtime of the
other kind takes other flags) and restarts the service, whose start proves itself. Running it again rolls
forward.

    pyinfra inventory.py tasks/rollback.py   (or bin/rig rollback)
"""

from __future__ import annotations

import shlex

from pyinfra.api import deploy

from vllm_rig.core.stamp import streamed
from vllm_rig.paths import RuntimeDirs
from vllm_rig.settings import Settings


@deploy("Rollback")
def roll_back(s: Settings) -> None:
    script = RuntimeDirs(s.install_root, "").rollback_script
    streamed(
        name="Roll the runtime back to the previous one",
        command=f"test -x {shlex.quote(script)} || "
        "{ echo 'nothing to roll back: this box has no runtime from a deploy yet; nothing changed'; exit 0; }; "
        f"{shlex.quote(script)}",
    )
