"""The JSON API's destinations beyond one: the table of every queue and topic (sorted,
filtered and paged, so that a server with thousands answers with one page), making a
destination, publishing a test message, and a topic's durable subscriptions."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from wiremq.admin.answers import operation, tuned, waiting
from wiremq.admin.routes import ADMIN, OPERATOR, VIEWER, Call, HttpError, Query, Route
from wiremq.config.tuning import Tuning
from wiremq.modules.core import Core
from wiremq.modules.destinations.destination import Destination
from wiremq.modules.destinations.survey import Survey
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.rates import RATES
from wiremq.modules.security.permissions import ADMIN as ADMIN_PERMISSION
from wiremq.modules.security.permissions import CREATE, READ, WRITE
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX

PAGE_MAX = 1000  # destinations one page holds at most
KINDS = ("queue", "topic")
ORDERS = ("asc", "desc")
# The columns a table may be sorted by: the fields of a destination's state.
SORTS = (
    "name",
    "messages",
    "bytes",
    "stored_messages",
    "stored_bytes",
    "unacked",
    "producers",
    "consumers",
    "ready_consumers",
    "subscribers",
    "ready_subscribers",
    "durable_subscriptions",
    "received",
    "delivered",
    "policy",
    "watermarks",
    "shutdown",
    *RATES,
)


def _rate_reading(rate: str) -> Callable[[Destination, Survey], Any]:
    return lambda d, survey: survey.rates(d.name)[rate]


# The columns read without making a destination's state (a table of 100,000 sorted by
# one of them makes a page's states only): what the state says, read the same way.
CHEAP: dict[str, Callable[[Destination, Survey], Any]] = {
    "messages": lambda d, _: d.depth(),
    "received": lambda d, _: d.received,
    "delivered": lambda d, _: d.delivered,
    "producers": lambda d, _: len(d.producers),
    "consumers": lambda d, _: len(d.consumers),
    **{rate: _rate_reading(rate) for rate in RATES},
}
ENCODINGS = ("text", "base64")
PUBLISH_FIELDS = {"body", "headers", "persistent", "encoding"}
CREATE_FIELDS = {"name", "parameters"}


def _sort_value(value: Any) -> tuple[int, Any]:
    """A state field as a sort key: numbers (a flag as 0/1, a list of watermarks as how many
    are tripped) before text, an absent value first."""
    if value is None:
        return (0, 0)
    if isinstance(value, list):
        return (1, sum(1 for w in value if isinstance(w, dict) and w.get("tripped")))
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


class DestinationsApi:
    """The handlers (see the module docstring), on the core ``core()`` answers (503 while
    the server starts) and the parameters ``tuning`` changes."""

    def __init__(self, core: Callable[[], Core], tuning: Tuning) -> None:
        self.core = core
        self.tuning = tuning

    def row(self, destination: Destination) -> dict[str, Any]:
        """A destination's state with its latest rates (``modules/destinations/survey.py``)."""
        return {**destination.state(), **self.core().survey.rates(destination.name)}

    # -- the table -------------------------------------------------------------------------

    def table(self, call: Call) -> dict[str, Any]:
        registry = self.core().destinations
        kind = call.query.get("kind")
        prefix = {"queue": QUEUE_PREFIX, "topic": TOPIC_PREFIX}.get(kind, "")
        words = call.query.get("filter", "").lower()
        readable = [
            n for n in registry.sorted_names() if n.startswith(prefix) and call.may(READ, n)
        ]
        matched = [n for n in readable if words in n.lower()] if words else readable
        sort = call.query.get("sort", "name")
        descending = call.query.get("order", "asc") == "desc"
        offset = call.query.get("offset", 0)
        limit = call.query.get("limit", 50)
        if descending and sort == "name":
            matched = matched[::-1]
        reading = CHEAP.get(sort)
        if sort == "name":  # only the page's states are made
            page = (registry.get(name) for name in matched[offset : offset + limit])
            rows = [self.row(d) for d in page if d is not None]
        elif reading is not None:  # sorted without states, then only the page's are made
            survey = self.core().survey
            found = [d for d in map(registry.get, matched) if d is not None]
            found.sort(key=lambda d: _sort_value(reading(d, survey)), reverse=descending)
            rows = [self.row(d) for d in found[offset : offset + limit]]
        else:
            everyone = (registry.get(name) for name in matched)
            states = [self.row(d) for d in everyone if d is not None]
            states.sort(key=lambda s: _sort_value(s.get(sort)), reverse=descending)
            rows = states[offset : offset + limit]
        return {
            "kind": kind,
            "filter": words,
            "sort": sort,
            "order": "desc" if descending else "asc",
            "offset": offset,
            "limit": limit,
            "total": len(readable),
            "matched": len(matched),
            "destinations": rows,
        }

    # -- making one ------------------------------------------------------------------------

    def create(self, call: Call) -> dict[str, Any]:
        body = call.body
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise HttpError(400, 'the body must be {"name": "/queue/NAME", "parameters": {...}}')
        extra = sorted(set(body) - CREATE_FIELDS)
        if extra:
            raise HttpError(400, f"unknown fields {extra}: the body has name and parameters")
        name, parameters = body["name"], body.get("parameters", {})
        if not isinstance(parameters, dict):
            raise HttpError(400, "parameters must map Destination parameters to values")
        operations = self.core().operations
        operation(lambda: operations.check_new(name))
        tuning = self.tuning
        try:
            outcomes = tuned(
                lambda: tuning.change_destination(name, {**parameters, "declared": True})
            )
        except HttpError as error:
            if error.status != 404:
                raise
            raise HttpError(400, error.message) from None  # an unknown parameter in the body
        created = operation(lambda: operations.create(name))
        return {
            "destination": name,
            "kind": created.state()["kind"],
            "parameters": [
                {"key": o.key, "value": o.value, "applied": o.applied}
                for o in outcomes
                if not o.key.startswith("Destination.declared@")
            ],
        }

    def undeclare(self, name: str) -> None:
        """A deleted destination is no longer made at start (its other overrides stay)."""
        tuning = self.tuning
        if tuning.settings.destinations.get(name, {}).get("declared"):
            tuned(lambda: tuning.change_destination(name, {"declared": None}))

    # -- publishing ------------------------------------------------------------------------

    def publish(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["name"]
        body = call.body
        if not isinstance(body, dict):
            raise HttpError(400, 'the body must be {"body": "...", "headers": {...}}')
        extra = sorted(set(body) - PUBLISH_FIELDS)
        if extra:
            raise HttpError(400, f"unknown fields {extra}: the body has {sorted(PUBLISH_FIELDS)}")
        headers = body.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k for k, v in headers.items()
        ):
            raise HttpError(400, "headers must map names to text values")
        persistent = body.get("persistent", False)
        if not isinstance(persistent, bool):
            raise HttpError(400, "persistent must be true or false")
        content = _content(body.get("body", ""), body.get("encoding", "text"))
        core = self.core()
        if core.destinations.get(name) is None and not call.may(CREATE, name):
            raise HttpError(403, f"permission denied: {CREATE} {name[:200]}")
        publisher = core.publisher
        return waiting(
            lambda done, failed: publisher.publish(
                name, headers, content, persistent, done, failed
            ),
            lambda message_id: {
                "destination": name,
                "message_id": message_id,
                "persistent": persistent,
                "size": len(content),
            },
        )

    # -- durable subscriptions ---------------------------------------------------------------

    def _topic(self, name: str) -> Topic:
        found = self.core().destinations.get(name)
        if found is None:
            raise HttpError(404, f"no destination {name!r}")
        if not isinstance(found, Topic):
            raise HttpError(400, f"{name!r} is a queue: durable subscriptions are a topic's")
        return found

    def durable_list(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        topic = self._topic(call.params["name"]).name
        durables = self.core().durables
        return waiting(
            lambda done, failed: durables.list(topic, done, failed),
            lambda views: {"topic": topic, "subscriptions": [v.json() for v in views]},
        )

    def durable_remove(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        topic = self._topic(call.params["name"]).name
        if "client_id" not in call.query or "subscription" not in call.query:
            raise HttpError(400, "name the subscription: ?client_id=ID&subscription=NAME")
        client_id, name = call.query["client_id"], call.query["subscription"]
        durables = self.core().durables
        return waiting(
            lambda done, failed: durables.remove(
                topic, client_id, name, lambda: done(None), failed
            ),
            lambda _: {"topic": topic, "removed": f"{client_id}/{name}"},
        )

    # -- the table of routes -------------------------------------------------------------------

    def routes(self) -> list[Route]:
        name = "/api/destinations/{name}"
        return [
            Route(
                "GET",
                "/api/destinations",
                VIEWER,
                self.table,
                "the queues and topics you may read, one page of them: sorted by a column, "
                "filtered by name (total: all of them, matched: those the filter keeps)",
                "destinations",
                query=(
                    Query("kind", str, "queues or topics only", choices=KINDS),
                    Query("filter", str, "only names that contain this (any case)"),
                    Query("sort", str, "the column sorted by (default name)", choices=SORTS),
                    Query("order", str, "asc (default) or desc", choices=ORDERS),
                    Query("offset", int, "destinations skipped", 0),
                    Query("limit", int, "most destinations returned (50)", 1, PAGE_MAX),
                ),
                errors=(400,),
            ),
            Route(
                "POST",
                "/api/destinations",
                ADMIN,
                self.create,
                "make a queue or topic now, with its own Destination parameters: declared in "
                "config.xml (made at every start, never removed when idle)",
                "destinations",
                body={
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "parameters": {"type": "object"},
                    },
                },
                errors=(400, 409),
                body_permission=("name", CREATE),
            ),
            Route(
                "POST",
                f"{name}/messages",
                OPERATOR,
                self.publish,
                "publish a test message (answered once the server has it: stored, if "
                "persistent); needs write there, and create if it does not exist yet",
                "messages",
                body={
                    "type": "object",
                    "properties": {
                        "body": {"type": "string"},
                        "encoding": {"type": "string", "enum": list(ENCODINGS)},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "persistent": {"type": "boolean"},
                    },
                },
                errors=(400, 409),
                permission=WRITE,
            ),
            Route(
                "GET",
                f"{name}/durable",
                VIEWER,
                self.durable_list,
                "a topic's durable subscriptions: client id, name, selector, backlog, "
                "connected or not",
                "destinations",
                errors=(400, 404),
            ),
            Route(
                "DELETE",
                f"{name}/durable",
                OPERATOR,
                self.durable_remove,
                "remove a durable subscription and what its topic keeps only for it "
                "(refused while it is connected)",
                "destinations",
                query=(
                    Query("client_id", str, "the subscription's client id (may be empty)"),
                    Query("subscription", str, "the subscription's name"),
                ),
                errors=(400, 404, 409),
                permission=ADMIN_PERMISSION,
            ),
        ]


def _content(text: Any, encoding: Any) -> bytes:
    """A published body: text (UTF-8) or base64 (binary)."""
    if encoding not in ENCODINGS:
        raise HttpError(400, f"encoding must be one of {', '.join(ENCODINGS)}")
    if not isinstance(text, str):
        raise HttpError(400, "body must be a string (text, or base64 with encoding base64)")
    if encoding == "text":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(400, "body is not valid base64") from None
