"""``/api/openapi.json``: the JSON API described as OpenAPI 3, from the route table."""

from __future__ import annotations

import re
from typing import Any

from wiremq.admin.routes import Route

ERROR = {"$ref": "#/components/schemas/Error"}
STATUS_TEXT = {
    400: "bad request: the message says what is wrong",
    401: "no login, or a wrong one",
    403: "beyond your role, or a state-changing request without the X-CSRF-Token header",
    404: "no such thing",
    405: "method not allowed here",
    409: "conflicts with the state of the server",
    413: "request body too large (Admin.maxrequestbytes)",
    415: "the body must be JSON (Content-Type: application/json)",
    500: "the server could not do it (the message says why)",
    503: "the server is starting, or is a standby of an HA pair",
}
ALWAYS = (401, 403, 503)  # any route may answer these
HEALTH = {  # answered without a login, for load balancers and probes (docs/ha.md)
    "get": {
        "operationId": "health",
        "summary": "whether this node serves clients: 200 on a single server and on the "
        "active node of an HA pair, 503 on a standby (naming the active) or while starting",
        "tags": ["server"],
        "security": [],
        "responses": {
            "200": {"description": "serving: {role, node, active, epoch} ({role: single})"},
            "503": {"description": "not serving: {role: standby, node, active, epoch}"},
        },
    }
}


def openapi(routes: list[Route], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {"/api/health": HEALTH}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "wiremq admin API",
            "version": version,
            "description": (
                "The admin console's only source. Log in with HTTP Basic (users of "
                "`wiremq passwd`) or the console's session cookie; without a users file "
                "the API is open on 127.0.0.1. State-changing requests made with the "
                "cookie carry the X-CSRF-Token header of GET /api/session. Destination "
                "names are one path segment, percent-encoded (%2Fqueue%2Forders). Roles: "
                "viewer < operator < admin (x-wiremq-role)."
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"basic": []}, {"session": []}],
        "components": {
            "securitySchemes": {
                "basic": {"type": "http", "scheme": "basic"},
                "session": {"type": "apiKey", "in": "cookie", "name": "wiremq_session"},
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["status", "error"],
                    "properties": {
                        "status": {"type": "integer"},
                        "error": {"type": "string"},
                    },
                }
            },
        },
        "paths": paths,
    }


def _operation(route: Route) -> dict[str, Any]:
    statuses = sorted({*ALWAYS, *route.errors, *((413, 415) if route.body else ())})
    operation: dict[str, Any] = {
        "operationId": _operation_id(route),
        "summary": route.summary,
        "tags": [route.tag],
        "x-wiremq-role": route.role,
        **({"x-wiremq-permission": route.destination_permission} if "{name}" in route.path else {}),
        **(
            {"x-wiremq-body-permission": dict([route.body_permission])}
            if route.body_permission
            else {}
        ),
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", route.path)
        ]
        + [
            {
                "name": q.name,
                "in": "query",
                "required": False,
                "description": q.doc,
                "schema": _query_schema(q.kind, q.minimum, q.maximum, q.choices),
            }
            for q in route.query
        ],
        "responses": {
            "200": {
                "description": "done",
                "content": {"application/json": {"schema": route.response}},
            },
            **{
                str(status): {
                    "description": STATUS_TEXT[status],
                    "content": {"application/json": {"schema": ERROR}},
                }
                for status in statuses
            },
        },
    }
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": route.body}},
        }
    return operation


def _query_schema(
    kind: type, minimum: int | None, maximum: int | None, choices: tuple[str, ...]
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer" if kind is int else "string"}
    if choices:
        schema["enum"] = list(choices)
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _operation_id(route: Route) -> str:
    words = [w for w in re.split(r"[/{}.]+", route.path) if w and w != "api"]
    return route.method.lower() + "".join(w.capitalize() for w in words)
