"""vllm-rig: custom facts, operations and the settings schema behind the pyinfra deploy."""
