"""pyinfra project config: loaded by the pyinfra CLI before the inventory and before connecting."""

from vllm_rig.core import op_order, ssh_nodelay

# Remove the ~40 ms Nagle/delayed-ACK stall from every remote command (vllm_rig/core/ssh_nodelay.py).
ssh_nodelay.install()
# Order operations from the frames, not inspect.stack() (~3 ms per operation; vllm_rig/core/op_order.py).
op_order.install()
