"""The driver stage."""
