"""The JSON API's handlers: the console's only source, and every operator's.

Each handler reads the server's one query API (``WiremqServer.flow_state``),
its event stream, the history of its figures and the parameter registry, or
asks for a change (``Tuning``, ``Operations``); none keeps state of its own.
Everything runs on the event loop, as the server does; an action that waits
for the store answers when it is done (a Deferred).
"""

from __future__ import annotations

import json
import time
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from wiremq.admin.answers import operation, tuned, waiting
from wiremq.admin.destinations import DestinationsApi
from wiremq.admin.routes import ADMIN, OPERATOR, VIEWER, Call, HttpError, Query, Route
from wiremq.admin.story import StoryApi
from wiremq.admin.users import UsersApi
from wiremq.config.groups import AdminSettings, DestinationPolicy, ServerSettings
from wiremq.config.registry import Parameter
from wiremq.config.settings import DESTINATION_GROUP
from wiremq.config.tuning import Tuning, UnknownParameter
from wiremq.config.wizard import MANUAL_EXAMPLE, WizardInputs, allocate, written_values
from wiremq.modules.core import Core
from wiremq.modules.domains import domain_of
from wiremq.modules.events import EVENTS, EventStream
from wiremq.modules.history import History
from wiremq.modules.operations import Operations
from wiremq.modules.security.permissions import READ, WRITE
from wiremq.modules.security.users import Users

if TYPE_CHECKING:
    from wiremq.server.app import WiremqServer

EVENTS_MAX = 1000  # events one request returns at most
MESSAGES_MAX = 1000  # messages one browse returns at most

WIZARD_LABELS = (
    "Server memory (heap) in MB",
    "Estimated number of topics",
    "Estimated number of queues",
    "Largest message on any topic, bytes",
    "Largest message on any queue, bytes",
    "Average message rate, msg/s",
    "Client connections (producers and consumers)",
    "Most threads the server process may have",
)
_KINDS = {int: "integer", float: "number", bool: "boolean", str: "string"}
# The body of a route that puts a message somewhere: where.
TO_BODY = {"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}}
VALUE_BODY = {
    "type": "object",
    "required": ["value"],
    "properties": {"value": {"description": "the new value (a JSON number, boolean or string)"}},
}
WIZARD_FIELDS = [f.name for f in fields(WizardInputs)]
WIZARD_BODY = {
    "type": "object",
    "required": WIZARD_FIELDS,
    "properties": {name: {"type": "integer", "minimum": 0} for name in WIZARD_FIELDS},
}


SINGLE: dict[str, Any] = {  # /api/ha of a server that is no node of an HA pair
    "role": "single",
    "node": None,
    "since": None,
    "epoch": None,
    "reason": None,
    "takeover_seconds": None,
    "active": None,
    "lease_epoch": None,
    "lease_expires_in": None,
    "lease_released": None,
    "failovers": [],
    "history": [],
}


def _takeover_line(takeover: dict[str, Any]) -> str:
    """One takeover of the failover history, in words."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(takeover["at"]))
    previous = f" from {takeover['previous']}" if takeover["previous"] else ""
    return f"{when}: epoch {takeover['epoch']}, {takeover['node']}{previous} ({takeover['reason']})"


def describe(param: Parameter, tuning: Tuning) -> dict[str, Any]:
    """A parameter as the API shows it: in force, as configured, and its rules."""
    value = tuning.settings.get(param.group, param.name)
    configured = tuning.configured(param)
    return {
        "key": param.key,
        "group": param.group,
        "name": param.name,
        "value": value,
        "configured": configured,
        "restart_needed": configured != value,
        "default": param.default,
        "type": _KINDS[param.kind],
        "unit": param.unit,
        "minimum": param.minimum,
        "maximum": param.maximum,
        "off": param.off,
        "choices": list(param.choices),
        "allowed": param.allowed(),
        "live": param.live,
        "command_line": param.key in tuning.command_line,
        "doc": param.doc,
        "aliases": list(param.aliases),
    }


class Api:
    """The handlers, bound to one server."""

    def __init__(
        self,
        server: WiremqServer,
        tuning: Tuning,
        history: History,
        users: Users,
        events: EventStream = EVENTS,
    ) -> None:
        self.server = server
        self.tuning = tuning
        self.history = history
        self.events = events
        self.users = UsersApi(users)
        self.stories = StoryApi(
            server, Path(ServerSettings.read(server.settings, "Server").datadir)
        )
        self.destinations = DestinationsApi(self.core, tuning)
        self.console_host = ""  # where the console listens (set once it does)
        self.console_port = 0
        self.localhost_only = False  # no users file: the console listens on 127.0.0.1 only

    @property
    def admin(self) -> AdminSettings:
        return AdminSettings.read(self.server.settings, "Admin")

    @property
    def operations(self) -> Operations:
        core = self.server.core
        if core is None:
            raise self._not_serving()
        return core.operations

    def core(self) -> Core:
        core = self.server.core
        if core is None:
            raise self._not_serving()
        return core

    def state(self, destinations: bool = True, busiest: int | None = None) -> dict[str, Any]:
        """The query API's state (``destinations`` False: without each destination's;
        ``busiest``: with those of the destinations holding the most messages alone)."""
        self.core()
        return self.server.flow_state(destinations, busiest)

    def _not_serving(self) -> HttpError:
        """Why a node without its core cannot answer: starting, or an HA standby."""
        ha = self.server.ha
        if ha is None or ha.state()["role"] == "active":
            return HttpError(503, "the server is starting")
        active = ha.state()["active"] or "none yet"
        return HttpError(503, f"this node is a standby of its HA pair (the active: {active})")

    # -- the server -----------------------------------------------------------------------

    def session(self, call: Call) -> dict[str, Any]:
        return {
            "user": call.user,
            "role": call.role,
            "csrf_token": call.csrf,
            "open": call.user is None,
            "localhost_only": self.localhost_only,
        }

    def overview(self, call: Call) -> dict[str, Any]:
        state = self.state(destinations=False)
        return {
            "server": state["server"],
            "totals": state["totals"],
            "memory": state["memory"],
            "transactions": state["transactions"],
            "delivered_unacked": state["delivered_unacked"],
            "delivered_unacked_limit": state["delivered_unacked_limit"],
            "egress_load_factor": state["egress_load_factor"],
            "unfinished_frame_bytes": state["unfinished_frame_bytes"],
            "slow_disconnects": state["slow_disconnects"],
            "spool": state["spool"],
            "watermarks": state["watermarks"],
            "slow_subscribers": [s for s in state["sockets"] if s["verdict"] != "OK"],
            "events": self.events.total,
            "restart_needed": sorted(self.tuning.pending),
        }

    def whole_state(self, call: Call) -> dict[str, Any]:
        return self.state(busiest=self.admin.metricsdestinations)

    # -- high availability (docs/ha.md) -------------------------------------------------------

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /api/health`` (no login: load balancers and probes ask it): 200 where
        clients are served, 503 elsewhere (a standby names the active)."""
        ha = self.server.ha
        if ha is None:
            serving = self.server.core is not None
            return (200 if serving else 503), {"role": "single" if serving else "starting"}
        state = ha.state()
        answer = {
            "role": state["role"],
            "node": state["node"],
            "active": state["active"],
            "epoch": state["lease_epoch"],
        }
        return (200 if state["role"] == "active" else 503), answer

    def ha_view(self, call: Call) -> dict[str, Any]:
        """This node's role, the lease and the failover history (HA), or a single server."""
        ha = self.server.ha
        if ha is None:
            return dict(SINGLE)
        state = ha.state()
        state["history"] = [_takeover_line(t) for t in state["failovers"]]
        return state

    def metrics_state(self) -> dict[str, Any]:
        """What ``/metrics`` reads: the state with the busiest destinations', or on a standby
        its HA part alone."""
        ha = self.server.ha
        if self.server.core is None and ha is not None:
            return {"ha": ha.state()}
        return self.state(busiest=self.admin.metricsdestinations)

    def history_of(self, call: Call) -> dict[str, Any]:
        destination = call.query.get("destination")
        if destination is not None and domain_of(destination) is None:
            raise HttpError(400, f"{destination!r} is neither /queue/NAME nor /topic/NAME")
        return self.history.json(call.query.get("since", 0), destination)

    def event_list(self, call: Call) -> dict[str, Any]:
        limit = call.query.get("limit", 100)
        after = call.query.get("after", max(0, self.events.total - limit))
        return {
            "total": self.events.total,
            "events": [
                {"id": number, **{k: _plain(v) for k, v in record.items()}}
                for number, record in self.events.since(after, limit)
            ],
        }

    # -- connections -----------------------------------------------------------------------

    def connections(self, call: Call) -> dict[str, Any]:
        state = self.state(destinations=False)
        sockets = {s["session"]: s for s in state["sockets"]}
        return {"connections": [self._connection(c, sockets) for c in state["clients"]]}

    def _connection(self, client: dict[str, Any], sockets: dict[str, Any]) -> dict[str, Any]:
        socket = sockets.get(client["session"], {})
        subscriptions = client["subscriptions"]
        return {
            **client,
            **self.history.rates.of_connection(client["session"]),
            "consumers": len(subscriptions),
            "ready": all(s["ready"] for s in subscriptions) if subscriptions else None,
            "blocked": socket.get("blocked"),
            "slowness": socket.get("slowness"),
            "verdict": socket.get("verdict"),
        }

    def connection(self, call: Call) -> dict[str, Any]:
        state = self.state(destinations=False)
        sockets = {s["session"]: s for s in state["sockets"]}
        for client in state["clients"]:
            if client["session"] == call.params["session"]:
                return self._connection(client, sockets)
        raise HttpError(404, f"no connection with session {call.params['session']!r}")

    def disconnect(self, call: Call) -> dict[str, Any]:
        operation(lambda: self.operations.disconnect(call.params["session"]))
        return {"disconnected": call.params["session"]}

    # -- destinations ----------------------------------------------------------------------

    def destination(self, call: Call) -> dict[str, Any]:
        name = call.params["name"]
        found = self.core().destinations.get(name)
        if found is None:
            raise HttpError(404, f"no destination {name!r}")
        state = self.state(destinations=False)
        consumers = [
            {**s, "session": c["session"], "peer": c["peer"]}
            for c in state["clients"]
            for s in c["subscriptions"]
            if s["destination"] == name
        ]
        return {**self.destinations.row(found), "subscriptions": consumers}

    def purge(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["name"]
        return waiting(
            lambda done, failed: self.operations.purge(name, done, failed),
            lambda count: {"destination": name, "purged": count},
        )

    def delete(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["name"]

        def deleted(count: int) -> dict[str, Any]:
            self.destinations.undeclare(name)
            return {"destination": name, "deleted": True, "purged": count}

        return waiting(lambda done, failed: self.operations.delete(name, done, failed), deleted)

    def shutdown(self, call: Call) -> dict[str, Any]:
        return self._set_shutdown(call.params["name"], True)

    def resume(self, call: Call) -> dict[str, Any]:
        return self._set_shutdown(call.params["name"], False)

    def _set_shutdown(self, name: str, shut: bool) -> dict[str, Any]:
        if domain_of(name) is None:
            raise HttpError(400, f"{name!r} is neither /queue/NAME nor /topic/NAME")
        tuned(lambda: self.tuning.change_destination(name, {"shutdown": shut or None}))
        return {"destination": name, "shutdown": shut}

    def destination_parameters(self, call: Call) -> dict[str, Any]:
        name = call.params["name"]
        if domain_of(name) is None:
            raise HttpError(400, f"{name!r} is neither /queue/NAME nor /topic/NAME")
        policy = DestinationPolicy.for_destination(self.tuning.settings, name)
        overrides = self.tuning.settings.destinations.get(name, {})
        waiting = self.tuning.pending_destinations.get(name, {})
        result = []
        for param in self.tuning.settings.registry.in_group(DESTINATION_GROUP):
            value = getattr(policy, param.name)
            result.append(
                {
                    **describe(param, self.tuning),
                    "key": f"{param.key}@{name}",
                    "value": value,
                    "overridden": param.name in overrides,
                    "configured": waiting.get(param.name, value),
                    "restart_needed": param.name in waiting,
                }
            )
        return {"destination": name, "parameters": result}

    def set_destination_parameter(self, call: Call) -> dict[str, Any]:
        name, parameter = call.params["name"], call.params["parameter"]
        if domain_of(name) is None:
            raise HttpError(400, f"{name!r} is neither /queue/NAME nor /topic/NAME")
        value = _value(call.body)
        outcome = tuned(lambda: self.tuning.change_destination(name, {parameter: value}))
        return {
            "destination": name,
            "parameter": parameter,
            "value": value,
            "applied": outcome[0].applied,
        }

    # -- messages --------------------------------------------------------------------------

    def browse(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["name"]
        offset = call.query.get("offset", 0)
        limit = call.query.get("limit", 100)
        selector = call.query.get("selector", "")
        head = self.admin.browsebytes
        return waiting(
            lambda done, failed: self.operations.browse(
                name, offset, limit, selector, head, done, failed
            ),
            lambda page: {
                "destination": name,
                "offset": offset,
                "limit": limit,
                "selector": selector,
                "messages": [v.json() for v in page.messages],
                "more": page.more,
            },
        )

    def message(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name, message_id = call.params["name"], call.params["message"]
        return waiting(
            lambda done, failed: self.operations.message(
                name, message_id, self.admin.messagebytes, done, failed
            ),
            lambda view: {"destination": name, **view.json()},
        )

    def copy_message(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name, message_id = call.params["name"], call.params["message"]
        to = call.body.get("to") if isinstance(call.body, dict) else None
        if not isinstance(to, str):
            raise HttpError(400, 'the body must be {"to": "/queue/NAME or /topic/NAME"}')
        return waiting(
            lambda done, failed: self.operations.copy(name, message_id, to, done, failed),
            lambda where: {"message_id": message_id, "from": name, "to": where},
        )

    def delete_message(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        return self._take(call, None)

    def move_message(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        to = call.body.get("to") if isinstance(call.body, dict) else None
        if not isinstance(to, str):
            raise HttpError(400, 'the body must be {"to": "/queue/NAME or /topic/NAME"}')
        return self._take(call, to)

    def _take(self, call: Call, to: str | None) -> defer.Deferred[dict[str, Any]]:
        name, message_id = call.params["name"], call.params["message"]
        return waiting(
            lambda done, failed: self.operations.take(name, message_id, to, done, failed),
            lambda where: {"message_id": message_id, "from": name, "to": where},
        )

    def retry_message(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name, message_id = call.params["name"], call.params["message"]
        return waiting(
            lambda done, failed: self.operations.retry(
                name, message_id, done, failed, lambda to: call.may(WRITE, to)
            ),
            lambda where: {"message_id": message_id, "from": name, "to": where},
        )

    # -- parameters ------------------------------------------------------------------------

    def parameters(self, call: Call) -> dict[str, Any]:
        group = call.query.get("group")
        registry = self.tuning.settings.registry
        if group is not None and registry.group(group) is None:
            raise HttpError(404, f"no parameter group {group!r}")
        chosen = registry.in_group(group) if group is not None else list(registry)
        return {
            "config": str(self.tuning.path),
            "parameters": [describe(p, self.tuning) for p in chosen],
        }

    def parameter(self, call: Call) -> dict[str, Any]:
        try:
            param = self.tuning.param(call.params["key"])
        except UnknownParameter as error:
            raise HttpError(404, error.problem) from None
        return describe(param, self.tuning)

    def set_parameter(self, call: Call) -> dict[str, Any]:
        key = call.params["key"]
        try:
            param = self.tuning.param(key)
        except UnknownParameter as error:
            raise HttpError(404, error.problem) from None
        value = _value(call.body)
        outcome = tuned(lambda: self.tuning.change({param.key: value}))
        return {**describe(param, self.tuning), "applied": outcome[0].applied}

    def set_parameters(self, call: Call) -> dict[str, Any]:
        body = call.body
        values = body.get("values") if isinstance(body, dict) else None
        if not isinstance(values, dict) or not values:
            raise HttpError(400, 'the body must be {"values": {"Group.name": value, ...}}')
        outcomes = tuned(lambda: self.tuning.change(values))
        return {
            "changed": [{"key": o.key, "value": o.value, "applied": o.applied} for o in outcomes]
        }

    # -- the wizard ------------------------------------------------------------------------

    def wizard_form(self, call: Call) -> dict[str, Any]:
        return {
            "inputs": [
                {"name": f.name, "label": label, "example": getattr(MANUAL_EXAMPLE, f.name)}
                for f, label in zip(fields(WizardInputs), WIZARD_LABELS, strict=True)
            ]
        }

    def wizard(self, call: Call) -> dict[str, Any]:
        inputs = _wizard_inputs(call.body)
        allocations = allocate(inputs)
        values, missing = written_values(allocations, self.tuning.settings.registry)
        return {
            "allocations": [
                {
                    "key": a.key,
                    "value": a.value,
                    "reason": a.reason,
                    "parameter": a not in missing,
                }
                for a in allocations
            ],
            "values": values,
        }

    def wizard_apply(self, call: Call) -> dict[str, Any]:
        result = self.wizard(call)
        outcomes = tuned(lambda: self.tuning.change(result["values"]))
        return {
            **result,
            "changed": [{"key": o.key, "value": o.value, "applied": o.applied} for o in outcomes],
        }

    # -- helpers -----------------------------------------------------------------------------

    # -- the table -------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """Every route of the API (see ``routes.py``)."""
        return [
            *self._routes(),
            *self.destinations.routes(),
            *self.users.routes(),
            *self.stories.routes(),
        ]

    def _routes(self) -> list[Route]:
        name = "{name}"
        limit = Query("limit", int, "most items returned", 1, MESSAGES_MAX)
        return [
            Route(
                "GET",
                "/api/session",
                VIEWER,
                self.session,
                "who you are, your role and the CSRF token state-changing requests carry",
                "server",
            ),
            Route(
                "GET",
                "/api/overview",
                VIEWER,
                self.overview,
                "the server at a glance: totals, memory, transactions, watermarks",
                "server",
            ),
            Route(
                "GET",
                "/api/state",
                VIEWER,
                self.whole_state,
                "the whole query API (flow_state) as it is, with the states of the "
                "Admin.metricsdestinations destinations holding the most messages (every one: "
                "/api/destinations)",
                "server",
            ),
            Route(
                "GET",
                "/api/ha",
                VIEWER,
                self.ha_view,
                "this node's role in its HA pair, the lease's holder and the failover history "
                "(docs/ha.md); a single server says role single",
                "server",
            ),
            Route(
                "GET",
                "/api/history",
                VIEWER,
                self.history_of,
                "samples of the server's (or a destination's) figures for charts",
                "server",
                query=(
                    Query("since", int, "only samples after this (epoch seconds)", 0),
                    Query("destination", str, "a destination's samples instead"),
                ),
                errors=(400,),
            ),
            Route(
                "GET",
                "/api/events",
                VIEWER,
                self.event_list,
                "recent events, numbered: poll with after= for new ones",
                "server",
                query=(
                    Query("after", int, "only events numbered after this", 0),
                    Query("limit", int, "most events returned", 1, EVENTS_MAX),
                ),
            ),
            Route(
                "GET",
                "/api/connections",
                VIEWER,
                self.connections,
                "every client connection with its consumers and egress queues",
                "connections",
            ),
            Route(
                "GET",
                "/api/connections/{session}",
                VIEWER,
                self.connection,
                "one connection",
                "connections",
                errors=(404,),
            ),
            Route(
                "DELETE",
                "/api/connections/{session}",
                OPERATOR,
                self.disconnect,
                "disconnect a client (it gets an ERROR)",
                "connections",
                errors=(404,),
            ),
            Route(
                "GET",
                f"/api/destinations/{name}",
                VIEWER,
                self.destination,
                "one destination (its name percent-encoded: %2Fqueue%2Fx) with its consumers",
                "destinations",
                errors=(404,),
            ),
            Route(
                "DELETE",
                f"/api/destinations/{name}",
                ADMIN,
                self.delete,
                "purge a destination and remove it (refused while it has consumers)",
                "destinations",
                errors=(404, 409),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/purge",
                OPERATOR,
                self.purge,
                "remove every message waiting in a queue",
                "destinations",
                errors=(400, 404),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/shutdown",
                OPERATOR,
                self.shutdown,
                "refuse new messages (saved to config.xml)",
                "destinations",
                errors=(400,),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/resume",
                OPERATOR,
                self.resume,
                "take new messages again",
                "destinations",
                errors=(400,),
            ),
            Route(
                "GET",
                f"/api/destinations/{name}/parameters",
                VIEWER,
                self.destination_parameters,
                "the Destination parameters as they apply to one destination",
                "destinations",
                errors=(400,),
            ),
            Route(
                "PUT",
                f"/api/destinations/{name}/parameters/{{parameter}}",
                ADMIN,
                self.set_destination_parameter,
                "override a Destination parameter for one destination (null: the default "
                "applies again)",
                "destinations",
                body=VALUE_BODY,
                errors=(400, 404),
            ),
            Route(
                "GET",
                f"/api/destinations/{name}/messages",
                VIEWER,
                self.browse,
                "a page of the messages waiting in a queue, in delivery order, those a JMS "
                "selector selects, with the first bytes of each body (text, or hex if "
                "binary: encoding); more: whether others follow (read on the queue is enough)",
                "messages",
                query=(
                    Query("offset", int, "messages skipped (of those selected)", 0),
                    limit,
                    Query("selector", str, "a JMS selector: only the messages it selects"),
                ),
                errors=(400, 404),
            ),
            Route(
                "GET",
                f"/api/destinations/{name}/messages/{{message}}",
                VIEWER,
                self.message,
                "one waiting message whole: all its headers and its body (text, or hex if "
                "binary: encoding; size in bytes) (read on the queue is enough)",
                "messages",
                errors=(400, 404),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/messages/{{message}}/copy",
                OPERATOR,
                self.copy_message,
                "copy one waiting message to another destination (it stays where it is)",
                "messages",
                body=TO_BODY,
                errors=(400, 404, 409),
                permission=READ,  # the original stays: read it, write where the copy goes
                body_permission=("to", WRITE),
            ),
            Route(
                "DELETE",
                f"/api/destinations/{name}/messages/{{message}}",
                OPERATOR,
                self.delete_message,
                "delete one waiting message",
                "messages",
                errors=(400, 404),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/messages/{{message}}/move",
                OPERATOR,
                self.move_message,
                "move one waiting message to another destination",
                "messages",
                body=TO_BODY,
                errors=(400, 404, 409),
                body_permission=("to", WRITE),
            ),
            Route(
                "POST",
                f"/api/destinations/{name}/messages/{{message}}/retry",
                OPERATOR,
                self.retry_message,
                "send a dead message back to its original-destination (needs write there)",
                "messages",
                errors=(400, 404, 409),
            ),
            Route(
                "GET",
                "/api/parameters",
                VIEWER,
                self.parameters,
                "every parameter: value in force, as configured, default, bounds, unit",
                "parameters",
                query=(Query("group", str, "only this group's"),),
                errors=(404,),
            ),
            Route(
                "PATCH",
                "/api/parameters",
                ADMIN,
                self.set_parameters,
                "change several parameters at once, all or none",
                "parameters",
                body={
                    "type": "object",
                    "required": ["values"],
                    "properties": {"values": {"type": "object"}},
                },
                errors=(400, 404),
            ),
            Route(
                "GET",
                "/api/parameters/{key}",
                VIEWER,
                self.parameter,
                "one parameter (Group.name)",
                "parameters",
                errors=(404,),
            ),
            Route(
                "PUT",
                "/api/parameters/{key}",
                ADMIN,
                self.set_parameter,
                "change a parameter: at once if live, else at the next start; saved to config.xml",
                "parameters",
                body=VALUE_BODY,
                errors=(400, 404),
            ),
            Route(
                "GET",
                "/api/wizard",
                VIEWER,
                self.wizard_form,
                "the wizard's inputs, with the manual's example",
                "config",
            ),
            Route(
                "POST",
                "/api/wizard",
                VIEWER,
                self.wizard,
                "the configuration wizard's memory allocation for these inputs",
                "config",
                body=WIZARD_BODY,
                errors=(400,),
            ),
            Route(
                "POST",
                "/api/wizard/apply",
                ADMIN,
                self.wizard_apply,
                "the wizard's allocation, saved to config.xml (live values at once)",
                "config",
                body=WIZARD_BODY,
                errors=(400,),
            ),
        ]


def _value(body: Any) -> Any:
    if not isinstance(body, dict) or "value" not in body:
        raise HttpError(400, 'the body must be {"value": V}')
    extra = set(body) - {"value"}
    if extra:
        raise HttpError(400, f'unknown fields {sorted(extra)}: the body is {{"value": V}}')
    return body["value"]


def _wizard_inputs(body: Any) -> WizardInputs:
    required = WIZARD_FIELDS
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be an object with " + ", ".join(required))
    missing = [name for name in required if name not in body]
    extra = sorted(set(body) - set(required))
    if missing or extra:
        raise HttpError(400, f"missing fields {missing}, unknown fields {extra}")
    inputs = WizardInputs(**{name: body[name] for name in required})
    problems = inputs.problems()
    if problems:
        raise HttpError(400, "; ".join(problems))
    return inputs


def _plain(value: Any) -> Any:
    """An event field as JSON takes it."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)
