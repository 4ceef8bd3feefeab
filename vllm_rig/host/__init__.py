"""The host-side programs: standard library only, run by the host's system Python (or the runtime venv's)
before anything else is installed. Nothing here imports pyinfra or the control side."""
