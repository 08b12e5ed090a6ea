"""wiremq.stores."""
