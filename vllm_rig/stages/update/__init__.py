"""Fork releases and the guarded fork update (on demand, not part of deploy.py)."""
