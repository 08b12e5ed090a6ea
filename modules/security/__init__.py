"""Logins, users and per-destination permissions."""
