"""The service stage."""
