"""The run's summary per host: what changed, each stage's time, the next step (tasks/summary.py)."""
