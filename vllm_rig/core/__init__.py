"""The generic layer: pyinfra building blocks every stage uses (batched facts, files, packages, users,
systemd units, git checkouts, the keyed stamp, secrets) and the two pyinfra speed-ups. Nothing here knows
about GPUs, models or the fork."""
