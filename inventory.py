"""pyinfra inventory: the hosts in inventory/hosts.yml (copy inventory/hosts.example.yml to start).

pyinfra inventory.py deploy.py
"""

import sys
from pathlib import Path

from vllm_rig.core import op_order, ssh_nodelay
from vllm_rig.inventory_file import InventoryError, load_groups

ssh_nodelay.install()  # also when pyinfra runs from another directory (config.py is per cwd)
op_order.install()

_here = Path(__file__).resolve().parent

try:
    globals().update(load_groups(_here / "inventory" / "hosts.yml", _here / "group_data"))
except InventoryError as _err:
    sys.exit(f"inventory: {_err}")
