"""The version of wiremq installed (the distribution's metadata): ``wiremq --version``, the
API's document."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    """The installed distribution's version; "unknown" when run from a tree not installed."""
    try:
        return version("wiremq")
    except PackageNotFoundError:
        return "unknown"
