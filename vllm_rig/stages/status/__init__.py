"""The status view: what state each box is in, read-only (tasks/status.py)."""
