"""Keys (on demand): the LAN proxy's client keys, listed, added or revoked (tasks/keys.py, bin/rig keys)."""
