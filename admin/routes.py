"""The JSON API's routes: one table that both dispatches requests and documents them.

A ``Route`` names its method, its path pattern (``{name}`` matches one path
segment, percent-decoded, so a destination name is given as ``%2Fqueue%2Forders``),
the least role allowed, the permission it needs on the destination it names
(and on the one a body field names, ``body_permission``), its handler, and what
OpenAPI says of it. The router and ``openapi.py`` read the same table, so the
document cannot drift from what the server does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from wiremq.modules.security.permissions import ADMIN as ADMIN_PERMISSION
from wiremq.modules.security.permissions import READ
from wiremq.modules.security.users import ROLES

VIEWER, OPERATOR, ADMIN = ROLES[2], ROLES[1], ROLES[0]


class HttpError(Exception):
    """An answer other than success: ``status`` and a message for whoever asked."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Query:
    """A query-string parameter."""

    name: str
    kind: type  # int or str
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()  # the values a str may take (none: any)


@dataclass(frozen=True, slots=True)
class Call:
    """One request as a handler sees it."""

    params: dict[str, str]  # the path's {names}
    query: dict[str, Any]  # the declared query parameters given, typed
    body: Any  # the JSON body, if the route takes one
    user: str | None  # who asked (None: nobody logged in, the console is open)
    role: str
    csrf: str | None  # the CSRF token of the console login it came with
    may: Callable[[str, str], bool] = lambda permission, destination: True
    """Whether who asked holds ``permission`` on ``destination`` (an open console: yes)."""


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    role: str
    handler: Callable[[Call], Any]
    summary: str
    tag: str
    body: dict[str, Any] | None = None  # JSON schema of the request body
    query: tuple[Query, ...] = ()
    errors: tuple[int, ...] = ()  # statuses beyond those every route may answer
    response: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    permission: str | None = None  # on {name}; None: read to GET it, admin to act on it
    # (body field, permission): a destination the body names, and what it needs there
    body_permission: tuple[str, str] | None = None

    @property
    def destination_permission(self) -> str:
        """The permission the destination ``{name}`` names needs."""
        if self.permission is not None:
            return self.permission
        return READ if self.method == "GET" else ADMIN_PERMISSION

    def match(self, segments: list[str]) -> dict[str, str] | None:
        pattern = self.path.strip("/").split("/")
        if len(pattern) != len(segments):
            return None
        params = {}
        for expected, given in zip(pattern, segments, strict=True):
            if expected.startswith("{"):
                if not given:
                    return None
                params[expected[1:-1]] = given
            elif expected != given:
                return None
        return params

    def parse_query(self, raw: Mapping[bytes, list[bytes]]) -> dict[str, Any]:
        """The declared query parameters, typed and checked (400 otherwise)."""
        known = {q.name: q for q in self.query}
        values: dict[str, Any] = {}
        for key, given in raw.items():
            name = key.decode("utf-8", "replace")
            declared = known.get(name)
            if declared is None:
                raise HttpError(400, f"unknown query parameter {name!r}")
            text = given[-1].decode("utf-8", "replace")
            if declared.choices and text not in declared.choices:
                raise HttpError(
                    400,
                    f"query parameter {name}: {text[:80]!r} is not one of "
                    + ", ".join(declared.choices),
                )
            if declared.kind is int:
                if not text.lstrip("-").isdigit():
                    raise HttpError(400, f"query parameter {name}: {text!r} is not a whole number")
                number = int(text)
                low, high = declared.minimum, declared.maximum
                if (low is not None and number < low) or (high is not None and number > high):
                    raise HttpError(400, f"query parameter {name}: {number} is out of range")
                values[name] = number
            else:
                values[name] = text
        return values


def segments(path: bytes) -> list[str]:
    """A request path's segments after ``/api/``, each percent-decoded on its own."""
    raw = path.split(b"?", 1)[0].decode("latin-1").strip("/").split("/")
    return [unquote(part, errors="strict") for part in raw]


def find(routes: list[Route], method: str, parts: list[str]) -> tuple[Route, dict[str, str]]:
    """The route a request names: 404 if no path matches, 405 (with the methods that
    would) if only the method is wrong."""
    allowed = []
    for route in routes:
        params = route.match(parts)
        if params is None:
            continue
        if route.method == method:
            return route, params
        allowed.append(route.method)
    if allowed:
        raise HttpError(
            405, f"{method} is not allowed here", {"Allow": ", ".join(sorted(set(allowed)))}
        )
    raise HttpError(404, "no such API resource: /" + "/".join(parts))
