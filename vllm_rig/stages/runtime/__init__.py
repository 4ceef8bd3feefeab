"""The runtime stage."""
