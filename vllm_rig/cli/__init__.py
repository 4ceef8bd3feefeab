"""The owner's command line (bin/rig): one command, a subcommand for each job, each mapped onto the
pyinfra tasks in tasks/. Stdlib only at import, so `bin/rig --help` needs no virtual environment."""
