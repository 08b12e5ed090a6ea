"""The client side: a connection's STOMP adapter and its egress."""
