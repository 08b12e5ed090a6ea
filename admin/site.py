"""The admin console over HTTP: its pages, the JSON API, ``/metrics``, and its listener.

One twisted.web resource answers everything: ``/`` is the console (one page
whose script shows each view from the API), ``/static/`` its files, ``/login``
and ``/logout`` the console's login, ``/api/`` the JSON API (``api.py``,
documented at ``/api/openapi.json``) and ``/metrics`` the Prometheus figures.
``listen_console`` is the one place the listener is made, so that a TLS
context can be handed to it.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import structlog
from twisted.internet import defer
from twisted.internet.interfaces import IListeningPort
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from wiremq.admin import metrics
from wiremq.admin.api import Api
from wiremq.admin.auth import COOKIE, Gate, Identity
from wiremq.admin.openapi import openapi
from wiremq.admin.routes import VIEWER, Call, HttpError, Route, find, segments
from wiremq.config.groups import AdminSettings, ServerSettings, TlsSettings
from wiremq.config.tuning import CONFIG_FILE, Tuning
from wiremq.modules.history import History
from wiremq.modules.persistence.cleanup import Periodic
from wiremq.modules.security.permissions import permitted
from wiremq.modules.security.users import Users, UsersFile
from wiremq.server.descriptors import GatedFactory, SocketGate
from wiremq.server.tls import TlsContextFactory
from wiremq.server.version import installed_version

if TYPE_CHECKING:
    from wiremq.server.app import WiremqServer

log = structlog.get_logger("wiremq.admin")

STATIC = Path(__file__).parent / "static"
LOCALHOST = "127.0.0.1"
OK = 200
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'"
    ),
}
LOCALHOST_NOTE = (
    "No users file: this console needs no login and listens on 127.0.0.1 only. Add users "
    "with wiremq passwd NAME --role admin."
)


class Reply:
    """An answer: status, body and content type."""

    def __init__(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


def json_reply(status: int, document: Any) -> Reply:
    body = json.dumps(document, default=str).encode()
    return Reply(status, body, "application/json; charset=utf-8")


class Console(Resource):
    """Every page and call of the console (see the module docstring)."""

    isLeaf = True

    def __init__(self, api: Api, gate: Gate, secure: bool = False) -> None:
        """``secure``: served over TLS (its login cookie is then sent over TLS only)."""
        super().__init__()
        self.api = api
        self.gate = gate
        self.secure = secure
        self.routes: list[Route] = api.routes()
        self.document = openapi(self.routes, installed_version())

    def render(self, request: Request) -> Any:  # type: ignore[override]
        answer = defer.maybeDeferred(self._answer, request)
        answer.addErrback(self._failed, request)
        answer.addCallback(self._write, request)
        return NOT_DONE_YET

    def _answer(self, request: Request) -> Any:
        path = (request.path or b"/").decode("latin-1")
        method = request.method.decode("latin-1")
        if path.startswith("/api/") or path == "/api":
            return self._api(request, method)
        if path == "/metrics":
            return self._identified(request, VIEWER).addCallback(
                lambda _: Reply(200, self._metrics(), metrics.CONTENT_TYPE)
            )
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :], method)
        if path == "/login":
            return self._login(request, method)
        if path == "/logout":
            return self._logout(request, method)
        if path in ("/", "/index.html"):
            return self._page(request, method)
        raise HttpError(404, f"no page {path[:200]}")

    # -- the API ---------------------------------------------------------------------------

    def _api(self, request: Request, method: str) -> defer.Deferred[Reply]:
        try:
            parts = segments(request.uri)
        except UnicodeDecodeError:
            raise HttpError(400, "the path is not valid UTF-8 once percent-decoded") from None
        if parts == ["api", "openapi.json"] and method == "GET":
            return defer.succeed(json_reply(200, self.document))
        if parts == ["api", "health"] and method in ("GET", "HEAD"):
            return defer.succeed(json_reply(*self.api.health()))
        route, params = find(self.routes, method, parts)
        identified = self._identified(request, route.role)
        return identified.addCallback(self._call, request, route, params)

    def _call(
        self, identity: Identity, request: Request, route: Route, params: dict[str, str]
    ) -> defer.Deferred[Reply]:
        raw_query = parse_qs(request.uri.split(b"?", 1)[1]) if b"?" in request.uri else {}
        body = self._body(request) if route.body is not None else None
        self._check_permissions(identity, route, params, body)
        call = Call(
            params,
            route.parse_query(raw_query),
            body,
            identity.user,
            identity.role,
            identity.session.csrf if identity.session is not None else None,
            self._may(identity),
        )
        return defer.maybeDeferred(route.handler, call).addCallback(
            lambda document: json_reply(200, document)
        )

    def _check_permissions(
        self, identity: Identity, route: Route, params: dict[str, str], body: Any
    ) -> None:
        """Besides the role, a user's permissions on the destinations a call names
        (docs/security.md): the route's on ``{name}`` (read to look at it, admin to act on
        it, unless the route says otherwise) and the route's on a destination its body
        names (``Route.body_permission``: write where a message is put, create for a
        destination made). An open console (no users) allows everything."""
        needs = []
        if "name" in params:
            needs.append((route.destination_permission, params["name"]))
        if route.body_permission is not None and isinstance(body, dict):
            field, permission = route.body_permission
            target = body.get(field)
            if isinstance(target, str):
                needs.append((permission, target))
        may = self._may(identity)
        for permission, destination in needs:
            if not may(permission, destination):
                raise HttpError(403, f"permission denied: {permission} {destination[:200]}")

    def _may(self, identity: Identity) -> Callable[[str, str], bool]:
        """Whether ``identity`` holds a permission on a destination, asked as the users
        file says now."""
        if identity.user is None:
            return lambda permission, destination: True
        user = self.gate.user(identity.user)
        if user is None:
            return lambda permission, destination: False
        return lambda permission, destination: permitted(user, permission, destination)

    def _identified(self, request: Request, role: str) -> defer.Deferred[Identity]:
        def allowed(identity: Identity) -> Identity:
            if not identity.may(role):
                raise HttpError(
                    403, f"this needs the {role} role; {identity.user} is a {identity.role}"
                )
            return identity

        return defer.maybeDeferred(self.gate.identify, request).addCallback(allowed)

    def _body(self, request: Request) -> Any:
        limit = self.api.admin.maxrequestbytes
        content = request.content
        assert content is not None
        content.seek(0, 2)
        size = content.tell()
        if size > limit:
            raise HttpError(413, f"the body has {size} bytes; at most {limit} are taken")
        header = request.getHeader(b"content-type") or b""
        kind = header.decode("latin-1").split(";")[0].strip().lower()
        if kind != "application/json":
            raise HttpError(
                415,
                f"the body must be JSON (Content-Type: application/json), not {kind or 'none'!r}",
            )
        content.seek(0)
        try:
            return json.loads(content.read().decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise HttpError(400, f"the body is not valid JSON: {error}") from None

    def _metrics(self) -> bytes:
        state = self.api.metrics_state()
        return metrics.exposition(state, self.api.admin.metricsdestinations).encode()

    # -- pages -----------------------------------------------------------------------------

    def _page(self, request: Request, method: str) -> Reply:
        if method not in ("GET", "HEAD"):
            raise HttpError(405, f"{method} is not allowed here", {"Allow": "GET"})
        if not self.gate.open and self.gate.session(request) is None:
            return Reply(303, b"", "text/plain", Location="/login")
        return self._file("index.html")

    def _static(self, name: str, method: str) -> Reply:
        if method not in ("GET", "HEAD"):
            raise HttpError(405, f"{method} is not allowed here", {"Allow": "GET"})
        if "/" in name or name.startswith(".") or not name:
            raise HttpError(404, "no such file")
        return self._file(name)

    def _file(self, name: str, status: int = OK, **swap: str) -> Reply:
        path = STATIC / name
        if not path.is_file() or path.suffix not in CONTENT_TYPES:
            raise HttpError(404, "no such file")
        body = path.read_bytes()
        for key, text in swap.items():
            body = body.replace(f"{{{{{key}}}}}".encode(), html.escape(text).encode())
        return Reply(status, body, CONTENT_TYPES[path.suffix])

    def _login(self, request: Request, method: str) -> Any:
        note = LOCALHOST_NOTE if self.gate.open else ""
        if method in ("GET", "HEAD"):
            return self._file("login.html", message="", note=note)
        if method != "POST":
            raise HttpError(405, f"{method} is not allowed here", {"Allow": "GET, POST"})
        form = request.args or {}
        name = form.get(b"name", [b""])[-1].decode("utf-8", "replace")
        password = form.get(b"password", [b""])[-1].decode("utf-8", "replace")

        def made(session: Any) -> Reply:
            if session is None:
                log.info("console.login_failed", user=name[:64], peer=_peer(request))
                return self._file(
                    "login.html", 401, message="Wrong user name or password.", note=note
                )
            log.info("console.login", user=session.user, peer=_peer(request))
            request.addCookie(
                COOKIE,
                session.token,
                path="/",
                httpOnly=True,
                sameSite="strict",
                secure=self.secure,
            )
            return Reply(303, b"", "text/plain", Location="/")

        if self.gate.open:
            return Reply(303, b"", "text/plain", Location="/")
        return self.gate.log_in(name, password).addCallback(made)

    def _logout(self, request: Request, method: str) -> Any:
        if method != "POST":
            raise HttpError(405, f"{method} is not allowed here", {"Allow": "POST"})

        def out(identity: Identity) -> Reply:
            if identity.session is not None and identity.user is not None:
                self.gate.log_out(identity.session)
            request.addCookie(COOKIE, "", path="/", max_age="0", httpOnly=True, sameSite="strict")
            return json_reply(200, {"logged_out": identity.user})

        return self._identified(request, VIEWER).addCallback(out)

    # -- answering -------------------------------------------------------------------------

    def _failed(self, failure: Failure, request: Request) -> Reply:
        error = failure.value
        if isinstance(error, HttpError):
            reply = json_reply(error.status, {"status": error.status, "error": error.message})
            reply.headers.update(error.headers)
            return reply
        log.error(
            "console.failed",
            path=str(request.path)[:200],
            error=repr(error),
            traceback=failure.getTraceback(),
        )
        return json_reply(500, {"status": 500, "error": f"internal error: {error!r}"})

    def _write(self, reply: Reply, request: Request) -> None:
        if request.finished or request._disconnected:  # type: ignore[attr-defined]
            return
        request.setResponseCode(reply.status)
        request.setHeader(b"content-type", reply.content_type.encode())
        for name, value in {**SECURITY_HEADERS, **reply.headers}.items():
            request.setHeader(name.encode(), value.encode())
        if self.api.localhost_only:
            request.setHeader(b"x-wiremq-note", LOCALHOST_NOTE.encode())
        if request.method != b"HEAD":
            request.write(reply.body)
        request.finish()


def _peer(request: Request) -> str:
    peer = request.getClientAddress()
    return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"


def listen_console(
    reactor: Any, site: Site, port: int, host: str, tls: Any, max_connections: int
) -> IListeningPort:
    """The console's listener: TCP, or TLS with ``tls`` (a context factory, or None); with
    ``max_connections`` (``Admin.maxconnections``) open it accepts no more until one
    closes."""
    gate = SocketGate(max_connections)
    factory = GatedFactory(site, gate)
    if tls is not None:
        listening = reactor.listenSSL(port, factory, tls, interface=host)
    else:
        listening = reactor.listenTCP(port, factory, interface=host)
    return gate.watch(listening)  # type: ignore[no-any-return]


def start_console(server: WiremqServer, port: int | None = None) -> Console | None:
    """Serve the console for ``server``: on ``port`` (0: any free one), by default
    ``Admin.port`` (0: no console, None is returned). Without a users file it listens on
    127.0.0.1 only, whatever ``Admin.host`` says."""
    admin = AdminSettings.read(server.settings, "Admin")
    if port is None:
        if admin.port == 0:
            return None
        port = admin.port
    data = Path(ServerSettings.read(server.settings, "Server").datadir)
    users = Users(UsersFile(data))
    gate = Gate(users, lambda: AdminSettings.read(server.settings, "Admin").sessiontimeout)
    tuning = Tuning(
        server.settings, server.config.path or data / CONFIG_FILE, server.config.command_line
    )
    history = History(admin.history, admin.sampleinterval, admin.chartdestinations)
    api = Api(server, tuning, history, users)
    host = admin.host
    if not users.configured:
        api.localhost_only = True
        if host != LOCALHOST:
            log.warning("console.localhost_only", configured=host, reason="no users file")
        host = LOCALHOST
    console = Console(api, gate, secure=admin.tls)
    site = Site(console)
    site.displayTracebacks = False
    tls = None
    if admin.tls:
        where = server.config.path or "configuration"
        tls = TlsContextFactory(TlsSettings.read(server.settings, "TLS"), where)
    listening = listen_console(server.reactor, site, port, host, tls, admin.maxconnections)
    server.listeners.append(listening)
    api.console_host = host
    api.console_port = listening.getHost().port  # type: ignore[attr-defined]

    def sample() -> None:
        if server.core is not None:
            history.sample(time.time(), server.flow_state(busiest=admin.chartdestinations))

    server.add_task(
        Periodic(server.runtime, lambda: history.next_interval(admin.sampleinterval), sample)
    )
    log.info(
        "console.listening",
        host=host,
        port=api.console_port,
        logins=users.configured,
        scheme="https" if admin.tls else "http",
    )
    return console
