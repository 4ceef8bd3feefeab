"""First contact on demand: can the deploy reach and use each box (tasks/check.py, bin/rig check)."""
