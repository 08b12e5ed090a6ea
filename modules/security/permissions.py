"""Per-destination permissions: who may read, write, create or administer which destination.

A grant gives a set of permissions on the destinations a pattern matches. A
pattern is a destination name (``/queue/orders``) in which a level (the parts
of the name after ``/queue/`` or ``/topic/``, separated by dots) may be ``*``
(any one level) and the last level may be ``>`` (one level or more), as in
wildcard subscriptions; ``>`` alone matches every destination. A user holds
the grants of its own, of its groups and of the group ``everyone``; a
connection without a login (``Security.allowanonymous``) those of the groups
``anonymous`` and ``everyone``; an admin holds every permission everywhere.

- ``read``: subscribe (and, through a wildcard subscription, see the
  destination), browse;
- ``write``: send;
- ``create``: make a destination that does not exist yet (by sending to it or
  subscribing to it), make or remove a durable subscription;
- ``admin``: every permission on the destination, and the console's actions on
  it (purge, delete, shut down, move messages).

``permitted(user, permission, destination)`` is the one rule; ``Access`` asks
it for one connection and remembers the answers per destination, so that a
client sending to one destination pays for one dictionary lookup per batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from wiremq.modules.errors import Refused

READ = "read"
WRITE = "write"
CREATE = "create"
ADMIN = "admin"
PERMISSIONS = (READ, WRITE, CREATE, ADMIN)
_BITS = {READ: 1, WRITE: 2, CREATE: 4, ADMIN: 15}  # admin includes every other permission
ALL = 15

EVERYONE = "everyone"  # the group every connection belongs to
ANONYMOUS = "anonymous"  # the group of connections without a login

_PREFIXES = ("/queue/", "/topic/")


def permission_bits(permissions: Iterable[str]) -> int:
    """The permissions as a bit set; an unknown name is a ``ValueError`` naming it."""
    bits = 0
    for permission in permissions:
        if permission not in _BITS:
            raise ValueError(f"permission {permission!r} is not one of {', '.join(PERMISSIONS)}")
        bits |= _BITS[permission]
    return bits


def bit_names(bits: int) -> list[str]:
    """The permissions a bit set holds, by name (admin alone when it holds every one)."""
    if bits == ALL:
        return [ADMIN]
    return [name for name in (READ, WRITE, CREATE) if bits & _BITS[name]]


def _compile(pattern: str) -> re.Pattern[str]:
    """The regular expression of a destination pattern; ``ValueError`` says what is wrong."""
    if pattern == ">":
        return re.compile(r".+", re.DOTALL)
    prefix = next((p for p in _PREFIXES if pattern.startswith(p)), None)
    if prefix is None or len(pattern) == len(prefix):
        raise ValueError(
            f"destination pattern {pattern[:200]!r}: expected /queue/NAME, /topic/NAME or >"
        )
    levels = pattern[len(prefix) :].split(".")
    parts = []
    for index, level in enumerate(levels):
        if level == "*":
            parts.append(r"[^.]+")
        elif level == ">" and index == len(levels) - 1:
            parts.append(r".+")
        elif not level or "*" in level or ">" in level:
            raise ValueError(
                f"destination pattern {pattern[:200]!r}: a level is a name, * (one level) or, "
                "last, > (the rest)"
            )
        else:
            parts.append(re.escape(level))
    return re.compile(re.escape(prefix) + r"\.".join(parts), re.DOTALL)


@dataclass(frozen=True, slots=True)
class Grant:
    """Permissions (a bit set) on the destinations ``pattern`` matches."""

    pattern: str
    bits: int
    _match: Callable[[str], object] = field(compare=False, repr=False)

    @classmethod
    def of(cls, pattern: str, permissions: Iterable[str]) -> Grant:
        """A grant from the users file's words; ``ValueError`` names what is wrong."""
        return cls(pattern, permission_bits(permissions), _compile(pattern).fullmatch)

    @property
    def permissions(self) -> list[str]:
        return bit_names(self.bits)

    def matches(self, destination: str) -> bool:
        return self._match(destination) is not None


def granted(grants: Iterable[Grant], destination: str) -> int:
    """Every permission ``grants`` give on ``destination``, as a bit set."""
    bits = 0
    for grant in grants:
        if grant.bits & ~bits and grant.matches(destination):
            bits |= grant.bits
    return bits


class Grantee(Protocol):
    """A user as its permissions see it (``users.User``): an admin, or what it was granted."""

    @property
    def superuser(self) -> bool: ...
    @property
    def grants(self) -> tuple[Grant, ...]: ...


def permitted(user: Grantee, permission: str, destination: str) -> bool:
    """Whether ``user`` holds ``permission`` on ``destination`` (an admin holds every one)."""
    bit = _BITS[permission]
    return user.superuser or granted(user.grants, destination) & bit == bit


def denied(who: str, permission: str, destination: str) -> Refused:
    """The refusal of a request that needs ``permission`` on ``destination``."""
    shown = destination[:200]
    return Refused(
        f"permission denied: {permission} {shown}",
        f"{who} has no {permission} permission on {shown}",
    )


class Access:
    """What one connection's user may do, asked per destination and remembered.

    ``lookup()`` gives the user as the users file says now (None once removed:
    then nothing is allowed); it is asked again, and the answers forgotten,
    whenever ``generation()`` changes (the file was read again). At most
    ``cache_size`` destinations are remembered; past it the answers start over.
    """

    __slots__ = ("who", "_lookup", "_generation", "_seen", "_user", "_answers", "_cache_size")

    def __init__(
        self,
        who: str,
        lookup: Callable[[], Grantee | None],
        generation: Callable[[], int],
        cache_size: int,
    ) -> None:
        self.who = who  # how refusals name the user: "user 'alice'", "an anonymous client"
        self._lookup = lookup
        self._generation = generation
        self._seen = generation()
        self._user = lookup()
        self._answers: dict[str, int] = {}
        self._cache_size = cache_size

    @property
    def removed(self) -> bool:
        """Whether the user is no longer in the users file."""
        self._follow()
        return self._user is None

    def bits(self, destination: str) -> int:
        """The permissions held on ``destination``, as a bit set."""
        self._follow()
        found = self._answers.get(destination)
        if found is None:
            user = self._user
            if user is None:
                found = 0
            elif user.superuser:
                found = ALL
            else:
                found = granted(user.grants, destination)
            if len(self._answers) >= self._cache_size:
                self._answers.clear()
            self._answers[destination] = found
        return found

    def _follow(self) -> None:
        """The user as the users file says now, if it was read again."""
        if self._generation() != self._seen:
            self._seen = self._generation()
            self._user = self._lookup()
            self._answers.clear()

    def allows(self, permission: str, destination: str) -> bool:
        bit = _BITS[permission]
        return self.bits(destination) & bit == bit

    def check(self, permission: str, destination: str) -> None:
        """Raise the ERROR's ``Refused`` unless ``permission`` is held on ``destination``."""
        if not self.allows(permission, destination):
            raise denied(self.who, permission, destination)
