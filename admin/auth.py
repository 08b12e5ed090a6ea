"""Who is asking, and may they: logins for the console and the API.

With a users file in the data folder (``wiremq passwd``), every page and API
call needs a login: HTTP Basic on each request (scripts, Prometheus), or a
session cookie from the login page (the console). A wrong login gets 401, a
request beyond the user's role 403 (viewer < operator < admin). A user's role
is looked up on every request, so a change to the users file applies at once.

Without a users file the console is open to whoever can reach it, as admin;
it then listens on 127.0.0.1 only (``site.py``) and every page says so.

A state-changing request that comes with the session cookie (or to the open
console) must carry the session's CSRF token in ``X-CSRF-Token``: a browser
adds the cookie to a request another site makes it send, but that site cannot
read the token, nor set the header without the server's consent. Password
checks (scrypt) run on a thread, off the event loop that carries messages.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet import defer, threads
from twisted.web.server import Request

from wiremq.admin.routes import ADMIN, HttpError
from wiremq.modules.security.users import User, Users, UsersFileError

COOKIE = "wiremq_session"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = {b"GET", b"HEAD"}


@dataclass
class Session:
    """A console login: its cookie's token, its CSRF token, and when it was last used."""

    user: str
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    used: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who made a request: a user (None when the console is open) and their role."""

    user: str | None
    role: str
    session: Session | None  # the console login it came with, if any

    def may(self, role: str) -> bool:
        return User("", self.role, "").may(role)


class Gate:
    """Logins, sessions and roles (see the module docstring)."""

    def __init__(self, users: Users, session_timeout: Callable[[], float]) -> None:
        self.users = users
        self.session_timeout = session_timeout
        self.sessions: dict[str, Session] = {}
        self.open_session = Session(user="")  # the CSRF token of the open console

    @property
    def open(self) -> bool:
        """No users file: no logins, every request is the admin's."""
        self._refresh()
        return not self.users.configured

    def _refresh(self) -> None:
        # A users file turned invalid keeps the users last read; the error is the operator's.
        with contextlib.suppress(UsersFileError):
            self.users.refresh()

    def user(self, name: str) -> User | None:
        return next((u for u in self.users if u.name == name), None)

    def session(self, request: Request) -> Session | None:
        """The live console login whose cookie the request carries."""
        token = request.getCookie(COOKIE.encode())
        if token is None:
            return None
        session = self.sessions.get(token.decode("latin-1"))
        if session is None:
            return None
        now = time.monotonic()
        if now - session.used > self.session_timeout() or self.user(session.user) is None:
            del self.sessions[session.token]
            return None
        session.used = now
        return session

    def identify(self, request: Request) -> defer.Deferred[Identity]:
        """Who asks: 401 if nobody (or a wrong login), 403 without the CSRF token."""
        if self.open:
            self._check_csrf(request, self.open_session)
            return defer.succeed(Identity(None, ADMIN, self.open_session))
        session = self.session(request)
        if session is not None:
            self._check_csrf(request, session)
            user = self.user(session.user)
            assert user is not None
            return defer.succeed(Identity(user.name, user.role, session))
        credentials = _basic(request)
        if credentials is None:
            raise _unauthorized("log in: HTTP Basic, or the console's login page")
        name, password = credentials
        checked = threads.deferToThread(self.users.authenticate, name, password)

        def known(user: User | None) -> Identity:
            if user is None:
                raise _unauthorized("wrong user name or password")
            return Identity(user.name, user.role, None)

        return checked.addCallback(known)

    def _check_csrf(self, request: Request, session: Session) -> None:
        if request.method in SAFE_METHODS:
            return
        given = request.getHeader(CSRF_HEADER)
        if given is None or not hmac.compare_digest(given, session.csrf.encode()):
            raise HttpError(403, "missing or wrong X-CSRF-Token header (see GET /api/session)")

    def log_in(self, name: str, password: str) -> defer.Deferred[Session | None]:
        """A new console login, or None for a wrong user name or password."""
        checked = threads.deferToThread(self.users.authenticate, name, password)

        def made(user: User | None) -> Session | None:
            if user is None:
                return None
            self._forget_stale()
            session = Session(user.name)
            self.sessions[session.token] = session
            return session

        return checked.addCallback(made)

    def log_out(self, session: Session) -> None:
        self.sessions.pop(session.token, None)

    def _forget_stale(self) -> None:
        now, timeout = time.monotonic(), self.session_timeout()
        for token, session in list(self.sessions.items()):
            if now - session.used > timeout:
                del self.sessions[token]


def _basic(request: Request) -> tuple[str, str] | None:
    raw = request.getHeader(b"authorization")
    if raw is None:
        return None
    header = raw.decode("latin-1")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise _unauthorized(f"unsupported authorization scheme {scheme[:20]!r}: use Basic")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise _unauthorized("malformed Basic credentials") from None
    name, colon, password = decoded.partition(":")
    if not colon:
        raise _unauthorized("malformed Basic credentials: no ':' between name and password")
    return name, password


def _unauthorized(message: str) -> HttpError:
    return HttpError(401, message, {"WWW-Authenticate": 'Basic realm="wiremq", charset="UTF-8"'})
