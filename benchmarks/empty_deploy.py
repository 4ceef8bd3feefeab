"""A deploy with no operations: pyinfra's own floor (start, connect, disconnect) for the benchmarks."""
