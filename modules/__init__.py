"""wiremq.modules."""
