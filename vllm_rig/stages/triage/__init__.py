"""The triage bundle: one archive per host to attach to a bug report, secrets redacted (tasks/triage.py)."""
