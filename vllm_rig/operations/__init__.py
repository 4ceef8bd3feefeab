"""Custom pyinfra operations, each backed by a fact so a second run yields nothing."""
