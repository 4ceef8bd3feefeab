"""Remove on demand: what the deploy installed (tasks/remove.py, bin/rig remove)."""
