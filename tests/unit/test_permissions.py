"""Destination patterns, the permission rule, and a connection's remembered answers."""

from __future__ import annotations

import pytest

from wiremq.modules.errors import Refused
from wiremq.modules.security.permissions import Access, Grant, granted, permitted
from wiremq.modules.security.users import User


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("/queue/orders", ["/queue/orders"], ["/queue/orders.eu", "/topic/orders", "/queue/order"]),
        ("/queue/orders.*", ["/queue/orders.eu"], ["/queue/orders", "/queue/orders.eu.x"]),
        ("/topic/a.*.c", ["/topic/a.b.c"], ["/topic/a.b.c.d", "/topic/a.c"]),
        ("/topic/prices.>", ["/topic/prices.x", "/topic/prices.x.y"], ["/topic/prices"]),
        ("/queue/>", ["/queue/a", "/queue/a.b"], ["/topic/a"]),
        (">", ["/queue/a", "/topic/b.c"], []),
        ("/queue/a+b", ["/queue/a+b"], ["/queue/aab"]),  # no regular expressions
    ],
)
def test_a_pattern_matches_by_levels_as_wildcard_subscriptions_do(pattern, matching, not_matching):
    grant = Grant.of(pattern, ["read"])
    assert all(grant.matches(d) for d in matching)
    assert not any(grant.matches(d) for d in not_matching)


@pytest.mark.parametrize(
    "pattern", ["orders", "/queue/", "/queue/a.>.b", "/queue/a*", "/queue/a..b", "/temp/x"]
)
def test_an_invalid_pattern_is_refused_naming_it(pattern):
    with pytest.raises(ValueError, match="destination pattern"):
        Grant.of(pattern, ["read"])


def test_an_unknown_permission_is_refused_naming_it():
    with pytest.raises(ValueError, match="'delete' is not one of read, write, create, admin"):
        Grant.of("/queue/a", ["delete"])


def test_grants_add_up_and_admin_holds_every_permission():
    grants = (Grant.of("/queue/>", ["read"]), Grant.of("/queue/a", ["write"]))
    user = User("u", "viewer", "", grants=grants + (Grant.of("/topic/t", ["admin"]),))
    assert permitted(user, "read", "/queue/a") and permitted(user, "write", "/queue/a")
    assert not permitted(user, "write", "/queue/b") and not permitted(user, "create", "/queue/a")
    assert all(permitted(user, p, "/topic/t") for p in ("read", "write", "create", "admin"))
    assert not permitted(user, "admin", "/queue/a")
    assert granted(grants, "/queue/a") == 3
    admin = User("root", "admin", "")
    assert permitted(admin, "admin", "/topic/anything")


def test_a_connections_access_remembers_answers_until_the_users_change():
    users = {"u": User("u", "viewer", "", grants=(Grant.of("/queue/a", ["read"]),))}
    generation = [1]
    lookups = []

    def lookup() -> User | None:
        lookups.append(1)
        return users.get("u")

    access = Access("user 'u'", lookup, lambda: generation[0], 2)
    assert access.allows("read", "/queue/a") and not access.allows("write", "/queue/a")
    with pytest.raises(Refused, match="permission denied: write /queue/a") as refused:
        access.check("write", "/queue/a")
    assert refused.value.detail == "user 'u' has no write permission on /queue/a"
    assert len(lookups) == 1
    del users["u"]  # removed from the file: nothing is allowed once it is read again
    assert access.allows("read", "/queue/a")
    generation[0] += 1
    assert not access.allows("read", "/queue/a")
    assert len(lookups) == 2
    for name in ("/queue/b", "/queue/c", "/queue/d"):  # at most 2 remembered
        access.allows("read", name)
    assert len(access._answers) <= 2
