"""STOMP logins: who a CONNECT is, checked off the event loop, failures answered late.

A CONNECT names its user with ``login`` and ``passcode``, or, over TLS, with a
client certificate whose common name is the user's name (the certificate then
stands in for the passcode). Without a users file there is nobody to check
against: every connection is anonymous and may do everything. With one, a
connection without a login is refused unless ``Security.allowanonymous``.

A password check is a scrypt hash (~50 ms of CPU), so it runs on a worker
thread, and a login that succeeded is remembered as a keyed hash of name and
password (``Security.logincachesize``): a client that reconnects is not hashed
again. A failed login is answered only after a delay that doubles with each
failure from the same address (``loginfailuredelay`` up to
``loginfailuremaxdelay``, forgotten ``loginfailurememory`` after the last one),
and the address's next login is not checked before then; the passwords of one
address are checked one at a time. However many connections a guesser opens,
it gets one guess per delay, and the login worker one hash per address at once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from wiremq.config.groups import SecuritySettings
from wiremq.config.settings import Settings
from wiremq.modules.errors import Refused
from wiremq.modules.runtime import Runtime, Timer
from wiremq.modules.security.permissions import Access
from wiremq.modules.security.users import User, Users, UsersFileError

log = structlog.get_logger("wiremq.authentication")

LoggedIn = Callable[[Access | None, str | None], None]  # (access, user name); None: anyone
LOGIN_FAILED = "login failed"


@dataclass
class _Address:
    """What the throttle knows of one client address."""

    failures: int = 0
    last_failure: float = 0.0
    free_at: float = 0.0  # no password of the address is checked before this
    checking: bool = False  # one of its passwords is being checked
    waiting: deque[Callable[[], None]] = field(default_factory=deque)  # checks to run
    timer: Timer | None = None  # runs the next check at free_at


class LoginThrottle:
    """Password checks per client address: one at a time, none before the delay of the
    last failure is over (see the module docstring).

    Addresses are remembered while a check of theirs runs or waits, and those that
    failed until ``loginfailurememory`` after their last failure, at most ``capacity``
    of those (the least recently failed go first).
    """

    def __init__(self, settings: Settings, runtime: Runtime, capacity: int) -> None:
        self.settings = settings
        self.runtime = runtime
        self.capacity = capacity
        self._addresses: OrderedDict[str, _Address] = OrderedDict()

    def check(self, address: str, run: Callable[[], None]) -> None:
        """Run ``run``, a password check of ``address`` that ends with ``checked``, once
        the address may have its next password checked."""
        entry = self._addresses.get(address)
        if entry is None:
            entry = self._addresses[address] = _Address()
        entry.waiting.append(run)
        self._next(address, entry)

    def checked(self, address: str, ok: bool) -> tuple[int, float]:
        """A check of ``address`` ended: (its failures, seconds before a failure is
        answered; 0 for a success)."""
        entry = self._addresses[address]
        entry.checking = False
        result = (entry.failures, 0.0) if ok else self._fail(entry)
        self._next(address, entry)
        return result

    def failed(self, address: str) -> tuple[int, float]:
        """A login from ``address`` failed without a password to check (none given)."""
        entry = self._addresses.get(address)
        if entry is None:
            entry = self._addresses[address] = _Address()
        result = self._fail(entry)
        self._next(address, entry)
        return result

    def _fail(self, entry: _Address) -> tuple[int, float]:
        security = SecuritySettings.read(self.settings, "Security")
        now = self.runtime.monotonic()
        if now - entry.last_failure > security.loginfailurememory:
            entry.failures = 0
        entry.failures += 1
        entry.last_failure = now
        doubled = security.loginfailuredelay * 2 ** min(entry.failures - 1, 64)
        delay = min(doubled, security.loginfailuremaxdelay)
        entry.free_at = max(entry.free_at, now + delay)
        return entry.failures, delay

    def _next(self, address: str, entry: _Address) -> None:
        """Start the address's next check if it may start now, or when it may."""
        if entry.checking or entry.timer is not None:
            return
        now = self.runtime.monotonic()
        if entry.waiting and now < entry.free_at:
            entry.timer = self.runtime.call_later(entry.free_at - now, lambda: self._due(address))
        elif entry.waiting:
            entry.checking = True
            entry.waiting.popleft()()
        else:
            self._forget(address, entry, now)

    def _due(self, address: str) -> None:
        entry = self._addresses[address]
        entry.timer = None
        self._next(address, entry)

    def _forget(self, address: str, entry: _Address, now: float) -> None:
        """An idle address is kept only for its recent failures, and only so many."""
        memory = SecuritySettings.read(self.settings, "Security").loginfailurememory
        if not entry.failures or now - entry.last_failure > memory:
            del self._addresses[address]
            return
        self._addresses.move_to_end(address)
        while len(self._addresses) > self.capacity:
            oldest, first = next(iter(self._addresses.items()))
            if first.checking or first.waiting or first.timer is not None:
                break  # busy addresses hold a connection each: bounded by the connections
            del self._addresses[oldest]

    def __len__(self) -> int:
        return len(self._addresses)


class Authenticator:
    """Decides who each CONNECT is (see the module docstring)."""

    def __init__(self, users: Users, settings: Settings, runtime: Runtime, capacity: int) -> None:
        """``capacity``: how many failing addresses are remembered at most."""
        self.users = users
        self.settings = settings
        self.runtime = runtime
        self.throttle = LoginThrottle(settings, runtime, capacity)
        self._key = secrets.token_bytes(32)  # keys the remembered logins; never leaves memory
        self._remembered: OrderedDict[bytes, str] = OrderedDict()  # -> the password hash then

    def refresh(self) -> None:
        """Read the users file again if it changed; a broken file is logged, the users last
        read stay."""
        try:
            if self.users.refresh():
                log.info("users.loaded", users=len(self.users), path=str(self.users.file.path))
        except UsersFileError as error:
            log.error("users.invalid", error=str(error))

    def login(
        self,
        given_login: str | None,
        passcode: str | None,
        address: str,
        certificate: str | None,
        done: LoggedIn,
        refused: Callable[[Refused], None],
    ) -> None:
        """Decide who a client from ``address`` that gives ``given_login`` and ``passcode``
        is, ``certificate`` the name its verified client certificate gives (None without
        one): ``done(access, name)`` once it is known, or ``refused(refusal)`` once a
        failure's delay is over. Either may be called before this returns."""
        self.refresh()
        users = self.users
        if not users.configured:
            done(None, given_login)
            return
        security = SecuritySettings.read(self.settings, "Security")
        login = given_login or None
        if certificate is not None and (
            login is None or (passcode is None and login == certificate)
        ):
            if users.get(certificate) is not None:  # the certificate stands in for a passcode
                done(self.access(certificate), certificate)
            else:
                self._failed(address, certificate, "the certificate names no user", refused)
            return
        if login is None:
            if security.allowanonymous:
                done(self.access(None), None)
            else:
                self._failed(address, None, "a login is required", refused)
            return
        password = passcode or ""
        key = hmac.new(self._key, f"{login}\0{password}".encode(), hashlib.sha256).digest()
        known = users.get(login)
        if known is not None and self._remembered.get(key) == known.password_hash:
            self._remembered.move_to_end(key)
            done(self.access(login), login)
            return

        def checked(user: User | None) -> None:
            failures, delay = self.throttle.checked(address, user is not None)
            if user is None:
                self._refuse(address, login, "wrong login or passcode", failures, delay, refused)
                return
            self._remember(key, user.password_hash, security.logincachesize)
            done(self.access(login), login)

        def check() -> None:
            self.runtime.worker("login").submit(
                lambda: users.authenticate(login, password), checked, lambda error: checked(None)
            )

        self.throttle.check(address, check)

    def access(self, name: str | None) -> Access:
        """What user ``name`` (None: an anonymous client) may do, as the users file says
        from now on."""
        users = self.users
        size = SecuritySettings.read(self.settings, "Security").accesscachesize

        def generation() -> int:
            return users.generation

        if name is None:
            return Access("an anonymous client", lambda: users.anonymous, generation, size)
        return Access(f"user {name!r}", lambda: users.get(name), generation, size)

    def _remember(self, key: bytes, password_hash: str, size: int) -> None:
        if size <= 0:
            return
        self._remembered[key] = password_hash
        self._remembered.move_to_end(key)
        while len(self._remembered) > size:
            self._remembered.popitem(last=False)

    def _failed(
        self, address: str, login: str | None, why: str, refused: Callable[[Refused], None]
    ) -> None:
        """A login failed without a password to check."""
        failures, delay = self.throttle.failed(address)
        self._refuse(address, login, why, failures, delay, refused)

    def _refuse(
        self,
        address: str,
        login: str | None,
        why: str,
        failures: int,
        delay: float,
        refused: Callable[[Refused], None],
    ) -> None:
        log.warning(
            "client.login_failed",
            address=address,
            login=login,
            reason=why,
            failures=failures,
            delay=round(delay, 3),
        )
        refusal = Refused(LOGIN_FAILED, why)
        self.runtime.call_later(delay, lambda: refused(refusal))
