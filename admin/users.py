"""The JSON API's users and permissions: the users file ``wiremq passwd``, ``grant`` and
``revoke`` write, changed by an admin from the console.

Every change rewrites the file as the commands do (``UsersFile``, atomically), on
a thread: a password is hashed (scrypt, ~50 ms) and the file written off the
event loop. It takes effect as a change made with the commands does: the
console reads the file again on its next request, STOMP connections at their
next CONNECT and every ``Security.usersfilecheckinterval``. Two rules keep an
admin from locking everyone out from here: the first user of an open console
is an admin, and the last admin is neither removed nor demoted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, threads

from wiremq.admin.routes import ADMIN, Call, HttpError, Route
from wiremq.modules.security.permissions import PERMISSIONS
from wiremq.modules.security.users import ROLES, Directory, Users, UsersFile, UsersFileError

USER_FIELDS = {"name", "password", "role", "groups"}
CHANGE_FIELDS = {"password", "role", "groups"}
PERMISSIONS_BODY = {
    "type": "object",
    "required": ["permissions"],
    "properties": {
        "permissions": {"type": "array", "items": {"type": "string", "enum": list(PERMISSIONS)}}
    },
}


def _grants(grants: Any) -> dict[str, list[str]]:
    return {grant.pattern: grant.permissions for grant in grants}


def listing(directory: Directory) -> dict[str, Any]:
    """The users and groups as the API shows them (no password hashes)."""
    return {
        "users": [
            {
                "name": user.name,
                "role": user.role,
                "groups": list(user.groups),
                "permissions": _grants(user.permissions),
            }
            for user in sorted(directory.users.values(), key=lambda u: u.name)
        ],
        "groups": {name: _grants(grants) for name, grants in sorted(directory.groups.items())},
    }


class UsersApi:
    """The handlers (see the module docstring) on the users file of ``users``."""

    def __init__(self, users: Users) -> None:
        self.users = users
        self._one_at_a_time = threading.Lock()  # each change reads, then writes, the file

    @property
    def file(self) -> UsersFile:
        return self.users.file

    def _changed(self, change: Callable[[], Any]) -> defer.Deferred[dict[str, Any]]:
        """Run ``change`` on a thread, then answer with every user and group as now."""

        def run() -> dict[str, Any]:
            with self._one_at_a_time:
                change()
                return self._listing()

        def failed(failure: Any) -> Any:
            error = failure.value
            if isinstance(error, ValueError):
                raise HttpError(400, str(error))
            if isinstance(error, UsersFileError):
                raise HttpError(409, f"the users file is not valid: {error}")
            if isinstance(error, OSError):
                raise HttpError(500, f"{self.file.path}: {error.strerror}")
            return failure

        return threads.deferToThread(run).addErrback(failed)

    def _listing(self) -> dict[str, Any]:
        return {
            "file": str(self.file.path),
            "configured": self.file.exists(),
            "roles": list(ROLES),
            "permissions": list(PERMISSIONS),
            **listing(self.file.read()),
        }

    def everyone(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        return self._changed(lambda: None)

    def add(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        body = _body(call.body, USER_FIELDS, required=("name", "password", "role"))
        name, password, role = body["name"], body["password"], body["role"]
        groups = _groups(body)

        def add() -> None:
            directory = self.file.read()
            if name in directory.users:
                raise _Conflict(f"user {name!r} exists: change it instead")
            if not self.file.exists() and role != ROLES[0]:
                raise ValueError(
                    "the first user must be an admin: once there is a users file, the "
                    "console needs a login"
                )
            self.file.set(name, password, role, groups)

        return self._changed(add).addErrback(_conflicts)

    def change(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["user"]
        body = _body(call.body, CHANGE_FIELDS, required=())
        if not body:
            raise HttpError(400, f"nothing to change: give any of {sorted(CHANGE_FIELDS)}")
        password, role, groups = body.get("password"), body.get("role"), _groups(body)

        def change() -> None:
            directory = self._existing(name)
            if role is not None and role != ROLES[0]:
                self._keep_an_admin(directory, name, "demoted")
            if password is not None:
                self.file.set(name, password, role, groups)
            else:
                self.file.change(name, role, groups)

        return self._changed(change).addErrback(_conflicts)

    def remove(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name = call.params["user"]

        def remove() -> None:
            self._keep_an_admin(self._existing(name), name, "removed")
            self.file.delete(name)

        return self._changed(remove).addErrback(_conflicts)

    def _existing(self, name: str) -> Directory:
        directory = self.file.read()
        if name not in directory.users:
            raise _Missing(f"no user {name!r}")
        return directory

    @staticmethod
    def _keep_an_admin(directory: Directory, name: str, done: str) -> None:
        admins = [u for u in directory.users.values() if u.role == ROLES[0]]
        if [u.name for u in admins] == [name]:
            raise _Conflict(f"{name} is the last admin: it cannot be {done} from the console")

    def user_permissions(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        name, pattern = call.params["user"], call.params["pattern"]
        words = _permissions(call.body)

        def change() -> None:
            self._existing(name)
            self.file.set_permissions(name, None, pattern, words)

        return self._changed(change).addErrback(_conflicts)

    def group_permissions(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        group, pattern = call.params["group"], call.params["pattern"]
        words = _permissions(call.body)
        return self._changed(lambda: self.file.set_permissions(None, group, pattern, words))

    def routes(self) -> list[Route]:
        user = {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "password": {"type": "string"},
                "role": {"type": "string", "enum": list(ROLES)},
                "groups": {"type": "array", "items": {"type": "string"}},
            },
        }
        return [
            Route(
                "GET",
                "/api/users",
                ADMIN,
                self.everyone,
                "the users file: every user (role, groups, permissions) and group",
                "users",
            ),
            Route(
                "POST",
                "/api/users",
                ADMIN,
                self.add,
                "add a user (as wiremq passwd); the first one of an open console is an admin",
                "users",
                body={**user, "required": ["name", "password", "role"]},
                errors=(400, 409),
            ),
            Route(
                "PATCH",
                "/api/users/{user}",
                ADMIN,
                self.change,
                "change a user's password, role or groups (the last admin stays one)",
                "users",
                body=user,
                errors=(400, 404, 409),
            ),
            Route(
                "DELETE",
                "/api/users/{user}",
                ADMIN,
                self.remove,
                "remove a user (not the last admin); their console sessions end at once",
                "users",
                errors=(404, 409),
            ),
            Route(
                "PUT",
                "/api/users/{user}/permissions/{pattern}",
                ADMIN,
                self.user_permissions,
                "a user's permissions on a destination pattern (percent-encoded: "
                "%2Fqueue%2Forders.%3E), exactly these (none: the grant goes)",
                "users",
                body=PERMISSIONS_BODY,
                errors=(400, 404),
            ),
            Route(
                "PUT",
                "/api/groups/{group}/permissions/{pattern}",
                ADMIN,
                self.group_permissions,
                "a group's permissions on a destination pattern (everyone: every client; "
                "anonymous: clients without a login), exactly these",
                "users",
                body=PERMISSIONS_BODY,
                errors=(400,),
            ),
        ]


class _Conflict(Exception):
    """A change the users file allows but the console refuses (409)."""


class _Missing(Exception):
    """No such user (404)."""


def _conflicts(failure: Any) -> Any:
    error = failure.value
    if isinstance(error, _Conflict):
        raise HttpError(409, str(error))
    if isinstance(error, _Missing):
        raise HttpError(404, str(error))
    return failure


def _body(body: Any, fields: set[str], required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HttpError(400, f"the body must be an object with {sorted(fields)}")
    extra = sorted(set(body) - fields)
    missing = [name for name in required if name not in body]
    if extra or missing:
        raise HttpError(400, f"missing fields {missing}, unknown fields {extra}")
    for name in ("name", "password", "role"):
        if name in body and not isinstance(body[name], str):
            raise HttpError(400, f"{name} must be a string")
    if "role" in body and body["role"] not in ROLES:
        raise HttpError(400, f"role {body['role']!r} is not one of {', '.join(ROLES)}")
    return body


def _groups(body: dict[str, Any]) -> list[str] | None:
    groups = body.get("groups")
    if groups is None:
        return None
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise HttpError(400, "groups must be a list of group names")
    return groups


def _permissions(body: Any) -> list[str]:
    words = body.get("permissions") if isinstance(body, dict) else None
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise HttpError(400, 'the body must be {"permissions": ["read", "write", ...]}')
    unknown = sorted(set(words) - set(PERMISSIONS))
    if unknown or set(body) != {"permissions"}:
        raise HttpError(
            400, f"permissions are {', '.join(PERMISSIONS)} (not {unknown}); no other field"
        )
    return words
