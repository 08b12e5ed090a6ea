"""The console's fixtures, for the dashboard's test."""

from tests.integration.console import console, console_of  # noqa: F401  (fixtures)
