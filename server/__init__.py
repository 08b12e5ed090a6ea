"""wiremq.server."""
