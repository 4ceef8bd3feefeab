"""The op-order hook gives pyinfra the same order as pyinfra's own stack reading, through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from vllm_rig.core import op_order

REPO = Path(__file__).resolve().parents[2]
DEPLOY = Path(__file__).parent / "fixtures" / "op_order"
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))


def _orders(hook: bool) -> tuple[list[str], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_RIG_OP_ORDER_HOOK": "1" if hook else "0"}
    run = subprocess.run(
        [PYINFRA, "-y", "@local", "deploy.py", "--dry", "--debug"],
        cwd=DEPLOY,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return re.findall(r"Adding operation, (\{.*?\}), opOrder=(\([^)]*\))", run.stderr), run.stderr


def test_the_hook_orders_every_operation_as_pyinfra_does() -> None:
    stock, stock_log = _orders(hook=False)
    hooked, hooked_log = _orders(hook=True)
    assert "op-order hook installed" in hooked_log and "op-order hook installed" not in stock_log
    assert len(stock) == 10  # every operation of the fixture deploy was added
    assert hooked == stock


def test_install_is_idempotent_and_replaces_pyinfras_function() -> None:
    module = op_order._operation
    before = module.get_operation_order_from_stack  # fails if pyinfra renamed what the hook replaces
    try:
        op_order.install()
        op_order.install()
        assert module.get_operation_order_from_stack is op_order.operation_order
    finally:
        module.get_operation_order_from_stack = before
