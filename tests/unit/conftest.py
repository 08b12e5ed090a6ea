"""Fixtures of the unit tests."""

from tests.unit.net import make_net  # noqa: F401 - a fixture
