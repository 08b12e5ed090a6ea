"""A client of the console's JSON API over real HTTP, and the fixtures that start a console.

``Api`` speaks to a console started on a free port next to an in-process
server; it logs in with HTTP Basic (``auth``) or the session cookie
(``log_in``), and sends the CSRF token the console asks for.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import StartServer, call_in_reactor
from wiremq.admin.site import Console, start_console
from wiremq.server.app import WiremqServer


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        return str(self.json["error"])


def encoded(name: str) -> str:
    """A destination name (or any value) as one path segment."""
    return quote(name, safe="")


@dataclass
class Api:
    """HTTP requests to one console."""

    port: int
    auth: tuple[str, str] | None = None
    cookie: str | None = None
    csrf: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None  # HTTPS, checking the console's certificate with it

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Answer:
        sent = {**self.extra, **(headers or {})}
        if self.auth is not None:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            sent.setdefault("Authorization", f"Basic {token}")
        if self.cookie is not None:
            sent.setdefault("Cookie", f"wiremq_session={self.cookie}")
        if self.csrf is not None and method not in ("GET", "HEAD"):
            sent.setdefault("X-CSRF-Token", self.csrf)
        payload = raw
        if body is not None:
            payload = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        connection = (
            http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.tls)
            if self.tls is not None
            else http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        )
        try:
            connection.request(method, path, body=payload, headers=sent)
            response = connection.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            return Answer(response.status, headers, response.read())
        finally:
            connection.close()

    def get(self, path: str) -> Any:
        answer = self.request("GET", path)
        assert answer.status == 200, (answer.status, answer.body[:500])
        return answer.json

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        answer = self.request(method, path, body)
        assert answer.status == 200, (answer.status, answer.body[:500])
        return answer.json

    def with_csrf(self) -> Api:
        """The same client, carrying the CSRF token of its console session."""
        self.csrf = self.get("/api/session")["csrf_token"]
        return self

    def log_in(self, name: str, password: str) -> Answer:
        """The console's login form: on success the session cookie is kept."""
        form = f"name={quote(name)}&password={quote(password)}".encode()
        answer = self.request(
            "POST",
            "/login",
            raw=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        cookie = answer.headers.get("set-cookie", "")
        if answer.status == 303 and cookie.startswith("wiremq_session="):
            self.cookie = cookie.split(";", 1)[0].split("=", 1)[1]
        return answer

    def set_parameter(self, key: str, value: Any) -> Any:
        return self.ok("PUT", f"/api/parameters/{key}", {"value": value})


ConsoleOf = Callable[..., Api]


def open_console(reactor: object, server: WiremqServer) -> Api:
    """A console for ``server`` on a free port, and a client of it (with the CSRF token of
    the open console when there is no users file; else without a login)."""
    console = call_in_reactor(reactor, lambda: start_console(server, port=0))
    assert isinstance(console, Console)
    api = Api(console.api.console_port)
    return api.with_csrf() if console.gate.open else api


@pytest.fixture
def console_of(reactor: object) -> Iterator[ConsoleOf]:
    """``console_of(server)``: the console of a started server, as an ``Api`` (its
    listener closes with the server)."""
    yield lambda server: open_console(reactor, server)


@pytest.fixture
def console(start_server: StartServer, console_of: ConsoleOf) -> tuple[WiremqServer, Api]:
    """A server with the default configuration and its open console."""
    server = start_server()
    return server, console_of(server)
