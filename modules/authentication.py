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
and the address's next login is not checked before then, however many
connections it opens: a guesser gets one guess per delay.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from wiremq.config.groups import SecuritySettings
from wiremq.config.settings import Settings
from wiremq.modules.errors import Refused
from wiremq.modules.permissions import Access
from wiremq.modules.runtime import Runtime
from wiremq.modules.users import User, Users, UsersFileError

log = structlog.get_logger("wiremq.authentication")

LoggedIn = Callable[[Access | None, str | None], None]  # (access, user name); None: anyone
LOGIN_FAILED = "login failed"


@dataclass
class _Failures:
    count: int
    last: float  # when the last failure happened
    free_at: float  # no login from the address is checked before this


class LoginThrottle:
    """Failed logins per client address (see the module docstring).

    Only addresses that failed are remembered, at most ``capacity`` of them (the
    oldest failures go first), each until ``loginfailurememory`` after its last
    failure.
    """

    def __init__(self, settings: Settings, capacity: int) -> None:
        self.settings = settings
        self.capacity = capacity
        self._failures: OrderedDict[str, _Failures] = OrderedDict()

    def _delay(self, count: int, security: SecuritySettings) -> float:
        return min(
            security.loginfailuredelay * 2 ** min(count - 1, 64), security.loginfailuremaxdelay
        )

    def wait(self, address: str, now: float) -> float:
        """Seconds before a login from ``address`` may be checked; the time is reserved,
        so that logins from an address that failed are checked one per delay."""
        entry = self._failures.get(address)
        if entry is None:
            return 0.0
        security = SecuritySettings.read(self.settings, "Security")
        if now - entry.last > security.loginfailurememory:
            del self._failures[address]
            return 0.0
        start = max(now, entry.free_at)
        entry.free_at = start + self._delay(entry.count, security)
        return start - now

    def failed(self, address: str, now: float) -> tuple[int, float]:
        """A login from ``address`` failed: (failures so far, seconds before its ERROR)."""
        security = SecuritySettings.read(self.settings, "Security")
        failures = self._failures
        while failures:  # forget the addresses whose failures are old
            oldest = next(iter(failures.values()))
            if now - oldest.last <= security.loginfailurememory and len(failures) < self.capacity:
                break
            failures.popitem(last=False)
        entry = failures.pop(address, None) or _Failures(0, now, now)
        entry.count += 1
        entry.last = now
        delay = self._delay(entry.count, security)
        entry.free_at = max(entry.free_at, now + delay)
        failures[address] = entry
        return entry.count, delay

    def __len__(self) -> int:
        return len(self._failures)


class Authenticator:
    """Decides who each CONNECT is (see the module docstring)."""

    def __init__(self, users: Users, settings: Settings, runtime: Runtime, capacity: int) -> None:
        """``capacity``: how many failing addresses are remembered at most."""
        self.users = users
        self.settings = settings
        self.runtime = runtime
        self.throttle = LoginThrottle(settings, capacity)
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
        headers: dict[str, str],
        address: str,
        certificate: str | None,
        done: LoggedIn,
        refused: Callable[[Refused], None],
    ) -> None:
        """Decide who a CONNECT with ``headers`` from ``address`` is, ``certificate`` the
        name its verified client certificate gives (None without one): ``done(access,
        name)`` once it is known, or ``refused(refusal)`` once a failure's delay is over.
        Either may be called before this returns."""
        self.refresh()
        users = self.users
        if not users.configured:
            done(None, headers.get("login"))
            return
        security = SecuritySettings.read(self.settings, "Security")
        login = headers.get("login") or None
        passcode = headers.get("passcode")
        if login is None or (passcode is None and login == certificate):
            if certificate is not None and users.get(certificate) is not None:
                done(self.access(certificate), certificate)
            elif login is None and certificate is None and security.allowanonymous:
                done(self.access(None), None)
            else:
                self._failed(address, login or certificate, "a login is required", refused)
            return
        password = passcode or ""
        key = hmac.new(self._key, f"{login}\0{password}".encode(), hashlib.sha256).digest()
        known = users.get(login)
        if known is not None and self._remembered.get(key) == known.password_hash:
            self._remembered.move_to_end(key)
            done(self.access(login), login)
            return

        def checked(user: User | None) -> None:
            if user is None:
                self._failed(address, login, "wrong login or passcode", refused)
                return
            self._remember(key, user.password_hash, security.logincachesize)
            done(self.access(login), login)

        def check() -> None:
            self.runtime.worker("login").submit(
                lambda: users.authenticate(login, password), checked, lambda error: checked(None)
            )

        wait = self.throttle.wait(address, self.runtime.monotonic())
        if wait > 0:
            self.runtime.call_later(wait, check)
        else:
            check()

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
        count, delay = self.throttle.failed(address, self.runtime.monotonic())
        log.warning(
            "client.login_failed",
            address=address,
            login=login,
            reason=why,
            failures=count,
            delay=round(delay, 3),
        )
        refusal = Refused(LOGIN_FAILED, why)
        self.runtime.call_later(delay, lambda: refused(refusal))
