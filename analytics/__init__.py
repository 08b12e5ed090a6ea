"""wiremq.analytics."""
