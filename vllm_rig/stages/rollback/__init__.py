"""Rollback on demand: the previous runtime back in place (tasks/rollback.py)."""
