"""Plan an operation on pyinfra's @fake host, whose facts print canned outputs: no machine needed."""

from __future__ import annotations

from typing import Any


def plan(responses: dict[str, Any], op: Any, **kwargs: Any) -> tuple[bool, list[str]]:
    """(will it change, the commands it would run) for `op` on a @fake host whose facts print `responses`
    (a fact's command containing a key prints that key's lines)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op
    from pyinfra.context import ctx_host, ctx_state

    inventory = Inventory((["@fake/box"], {"fake_responses": responses, "fake_delay": 0, "fake_delay_jitter": 0}))
    state = State(inventory, Config())
    connect_all(state)
    box = inventory.get_host("@fake/box")
    meta = add_op(state, op, **kwargs)[box]
    with ctx_state.use(state), ctx_host.use(box):
        commands = [str(c) for c in state.ops[box][meta._hash].command_generator()]
    return bool(meta.will_change), commands
