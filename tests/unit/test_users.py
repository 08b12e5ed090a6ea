"""The users file: salted hashes, atomic rewrites, clear errors, and the server's view of it."""

from __future__ import annotations

import json
import os

import pytest

from wiremq.modules.security.users import (
    USERS_FILE,
    Users,
    UsersFile,
    UsersFileError,
    hash_password,
    verify_password,
)


def test_a_password_hash_is_salted_and_verifies_only_its_password():
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first != second  # a salt of its own each time
    assert verify_password("s3cret", first) and verify_password("s3cret", second)
    assert not verify_password("s3cret!", first)
    assert not verify_password("s3cret", "md5$abc")  # not a hash this server wrote
    assert not verify_password("s3cret", "scrypt$x$8$1$00$00")


def test_set_adds_and_changes_users_and_the_file_is_owner_only(tmp_path):
    users = UsersFile(tmp_path)
    assert users.load() == {} and not users.exists()
    assert users.set("alice", "one", "admin") is True
    assert users.set("bob", "two", "viewer") is True
    assert users.set("alice", "three", None) is False  # a new password, the same role
    loaded = users.load()
    assert {u.name: u.role for u in loaded.values()} == {"alice": "admin", "bob": "viewer"}
    assert loaded["alice"].verify("three") and not loaded["alice"].verify("one")
    assert os.stat(tmp_path / USERS_FILE).st_mode & 0o777 == 0o600
    assert "three" not in (tmp_path / USERS_FILE).read_text()
    assert users.delete("bob") and not users.delete("bob")
    assert list(users.load()) == ["alice"]


@pytest.mark.parametrize(
    ("name", "password", "role", "message"),
    [
        ("carol", "pw", None, "give its role"),
        ("carol", "pw", "root", "not one of"),
        ("carol", "", "admin", "empty"),
        ("a:b", "pw", "admin", "without ':'"),
        ("", "pw", "admin", "1 to 64"),
        ("x" * 65, "pw", "admin", "1 to 64"),
    ],
)
def test_set_refuses_what_cannot_be_a_user(tmp_path, name, password, role, message):
    with pytest.raises(ValueError, match=message):
        UsersFile(tmp_path).set(name, password, role)
    assert not UsersFile(tmp_path).exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a valid users file"),
        ('{"version": 7, "users": {}}', "format version 7"),
        ('{"version": 1, "users": {"x": {"role": "king", "password": "p"}}}', "role 'king'"),
        ('{"version": 1}', "not a valid users file"),
    ],
)
def test_a_damaged_users_file_is_refused_naming_the_file(tmp_path, content, message):
    (tmp_path / USERS_FILE).write_text(content)
    with pytest.raises(UsersFileError, match=message) as refused:
        UsersFile(tmp_path).load()
    assert str(tmp_path / USERS_FILE) in str(refused.value)


def test_roles_include_those_below_them(tmp_path):
    users = UsersFile(tmp_path)
    users.set("a", "pw", "admin")
    users.set("o", "pw", "operator")
    users.set("v", "pw", "viewer")
    loaded = users.load()
    assert [loaded[n].may("operator") for n in "aov"] == [True, True, False]
    assert [loaded[n].may("viewer") for n in "aov"] == [True, True, True]
    assert [loaded[n].may("admin") for n in "aov"] == [True, False, False]


def test_the_server_sees_a_user_added_while_it_runs_and_keeps_users_if_the_file_breaks(tmp_path):
    users_file = UsersFile(tmp_path)
    users = Users(users_file)
    assert not users.configured and users.authenticate("alice", "pw") is None
    users_file.set("alice", "pw", "operator")
    users.refresh()
    assert users.configured
    alice = users.authenticate("alice", "pw")
    assert alice is not None and alice.role == "operator"
    assert users.authenticate("alice", "wrong") is None
    assert users.authenticate("nobody", "pw") is None
    (tmp_path / USERS_FILE).write_text(json.dumps({"version": 1, "users": "broken"}) + " ")
    with pytest.raises(UsersFileError):
        users.refresh()
    assert not users.refresh()  # reported once, read again once it changes
    assert users.authenticate("alice", "pw") is not None  # the users last read stay
    (tmp_path / USERS_FILE).unlink()
    users.refresh()
    assert not users.configured and len(users) == 0


def test_a_version_1_file_is_read_and_written_back_as_version_2(tmp_path):
    stored = hash_password("pw")
    (tmp_path / USERS_FILE).write_text(
        json.dumps({"version": 1, "users": {"old": {"role": "operator", "password": stored}}})
    )
    users = UsersFile(tmp_path)
    [old] = users.load().values()
    assert (old.name, old.role, old.groups, old.grants) == ("old", "operator", (), ())
    users.set("new", "pw2", "viewer", ["g"])
    document = json.loads((tmp_path / USERS_FILE).read_text())
    assert document["version"] == 2
    assert document["users"]["old"] == {"role": "operator", "password": stored}
    assert document["users"]["new"]["groups"] == ["g"]


def test_groups_and_grants_are_kept_resolved_and_revoked(tmp_path):
    users = UsersFile(tmp_path)
    users.set("alice", "pw", "operator", ["traders", "ops"])
    users.grant("alice", None, "/queue/alice.>", ["read", "write"])
    users.grant(None, "traders", "/topic/prices.>", ["read"])
    users.grant(None, "traders", "/topic/prices.>", ["create"])  # adds to the same pattern
    users.grant(None, "everyone", "/topic/news", ["read"])
    alice = users.load()["alice"]
    assert alice.groups == ("traders", "ops")
    assert [(g.pattern, g.permissions) for g in alice.grants] == [
        ("/queue/alice.>", ["read", "write"]),
        ("/topic/prices.>", ["read", "create"]),
        ("/topic/news", ["read"]),
    ]
    users.set("alice", "pw2", None)  # a new password keeps groups and grants
    assert users.load()["alice"].grants == alice.grants
    assert users.revoke(None, "traders", "/topic/prices.>", None)
    assert not users.revoke(None, "traders", "/topic/prices.>", None)
    assert "traders" not in users.read().groups  # a group left without grants goes
    assert users.revoke("alice", None, "/queue/alice.>", ["write"])
    assert [g.permissions for g in users.load()["alice"].permissions] == [["read"]]
    with pytest.raises(ValueError, match="no user 'carol'"):
        users.grant("carol", None, "/queue/a", ["read"])
    with pytest.raises(ValueError, match="not one of"):
        users.grant("alice", None, "/queue/a", ["fly"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"permissions": {"/queue/a": ["fly"]}}, "user 'x': permission 'fly'"),
        ({"permissions": {"queue": ["read"]}}, "user 'x': destination pattern 'queue'"),
        ({"permissions": {"/queue/a": "read"}}, "must be a list"),
        ({"permissions": ["/queue/a"]}, "must map destination patterns"),
        ({"groups": ["a:b"]}, "without ':'"),
    ],
)
def test_bad_groups_and_permissions_are_refused_naming_the_user(tmp_path, entry, message):
    user = {"role": "viewer", "password": "x", **entry}
    (tmp_path / USERS_FILE).write_text(json.dumps({"version": 2, "users": {"x": user}}))
    with pytest.raises(UsersFileError, match=message):
        UsersFile(tmp_path).load()


def test_the_anonymous_user_holds_the_anonymous_and_everyone_grants(tmp_path):
    users_file = UsersFile(tmp_path)
    users_file.set("alice", "pw", "viewer")
    users_file.grant(None, "anonymous", "/topic/public", ["read"])
    users_file.grant(None, "everyone", "/topic/news", ["read"])
    users = Users(users_file)
    assert [g.pattern for g in users.anonymous.grants] == ["/topic/public", "/topic/news"]
    assert [g.pattern for g in users.get("alice").grants] == ["/topic/news"]
    assert users.authenticate("", "") is None  # the anonymous user cannot log in
    generation = users.generation
    users_file.grant(None, "everyone", "/topic/more", ["read"])
    assert users.refresh() and users.generation == generation + 1
