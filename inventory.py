"""pyinfra inventory: the hosts in inventory/hosts.yml (copy inventory/hosts.example.yml to start).

pyinfra inventory.py deploy.py
"""

import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
if str(_here) not in sys.path:  # pyinfra puts only the cwd on sys.path: `pyinfra --chdir` or another cwd
    sys.path.insert(0, str(_here))

from vllm_rig.core import cli_limit, op_order, ssh_nodelay  # noqa: E402
from vllm_rig.inventory_file import InventoryError, load_groups  # noqa: E402

ssh_nodelay.install()  # also when pyinfra runs from another directory (config.py is per cwd)
op_order.install()
cli_limit.install()  # a --limit that matches no host is an error (pyinfra warns and exits 0)

try:
    globals().update(load_groups(_here / "inventory" / "hosts.yml", _here / "group_data"))
except InventoryError as _err:
    sys.exit(f"inventory: {_err}")
