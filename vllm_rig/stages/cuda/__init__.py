"""The cuda stage."""
