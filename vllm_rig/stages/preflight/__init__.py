"""The preflight stage."""
