"""Logs on demand: the service's, the runtime build's, the model download's or the watchdog's (tasks/logs.py)."""
