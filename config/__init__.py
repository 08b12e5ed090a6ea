"""wiremq.config."""
