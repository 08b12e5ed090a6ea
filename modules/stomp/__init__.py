"""wiremq.modules.stomp."""
