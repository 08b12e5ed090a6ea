"""wiremq.admin."""
