"""Unit tests of the flow-control building blocks."""
