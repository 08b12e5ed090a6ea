"""The server's users: names, roles and salted password hashes, in the data folder's users file.

One file, ``users.json`` in the data folder, serves the admin console and STOMP
logins alike. ``wiremq passwd`` writes it (atomically, readable by its owner
only); the server reads it at start and again whenever it changed, so a user
added while the server runs can log in at once. Passwords are kept as scrypt
hashes with a random salt per user, in a self-describing string
(``scrypt$n$r$p$salt$hash``), so that the cost can be raised later without
invalidating the hashes already stored.

Version 2 of the file adds groups and per-destination permissions
(``modules/security/permissions.py``); version 1 files (users and roles only) are read
as they are and written as version 2 on the next change::

    {"version": 2,
     "users": {"alice": {"role": "operator", "password": "scrypt$...",
                         "groups": ["traders"],
                         "permissions": {"/queue/alice.>": ["read", "write", "create"]}}},
     "groups": {"traders": {"permissions": {"/topic/prices.>": ["read"]}},
                "everyone": {"permissions": {"/topic/news": ["read"]}}}}
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wiremq.modules.security.permissions import (
    ADMIN,
    ANONYMOUS,
    EVERYONE,
    Grant,
    bit_names,
    permission_bits,
)

USERS_FILE = "users.json"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
ROLES = ("admin", "operator", "viewer")  # most to least allowed
MAX_NAME = 64

# scrypt's cost: ~50 ms and 16 MiB per hash here, enough to slow a guesser who stole the file.
_SCRYPT_N = 1 << 14
_SCRYPT_R = 8
_SCRYPT_P = 1
_SALT_BYTES = 16
_HASH_BYTES = 32


# A hash no password matches, checked for unknown names so that they take as long.
_UNKNOWN_USER = "$".join(
    ("scrypt", str(_SCRYPT_N), str(_SCRYPT_R), str(_SCRYPT_P))
    + ("00" * _SALT_BYTES, "00" * _HASH_BYTES)
)


class UsersFileError(Exception):
    """The users file cannot be read or holds something invalid; the text says where."""


@dataclass(frozen=True, slots=True)
class User:
    """One user: ``groups`` and ``permissions`` as the file says; ``grants`` everything the
    user may do on destinations (its own permissions, its groups' and everyone's),
    resolved when the file is read."""

    name: str
    role: str
    password_hash: str
    groups: tuple[str, ...] = ()
    permissions: tuple[Grant, ...] = ()
    grants: tuple[Grant, ...] = field(default=(), compare=False)

    @property
    def superuser(self) -> bool:
        """An admin holds every permission on every destination."""
        return self.role == ROLES[0]

    def verify(self, password: str) -> bool:
        """Whether ``password`` is this user's (in constant time for a given hash)."""
        return verify_password(password, self.password_hash)

    def may(self, role: str) -> bool:
        """Whether this user's role includes ``role`` (admin > operator > viewer)."""
        return ROLES.index(self.role) <= ROLES.index(role)


def hash_password(password: str) -> str:
    """A salted scrypt hash of ``password``, as stored in the users file."""
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = _scrypt(password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = bytes.fromhex(digest)
        actual = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=_HASH_BYTES
    )


def check_name(name: str) -> None:
    """A user name is 1-64 printable characters without ``:`` (HTTP Basic's separator)."""
    if not name or len(name) > MAX_NAME or not name.isprintable() or ":" in name:
        raise ValueError(
            f"user name {name[:80]!r}: 1 to {MAX_NAME} printable characters without ':'"
        )


@dataclass(frozen=True, slots=True)
class Directory:
    """Everything the users file holds: the users, and each group's permissions."""

    users: dict[str, User]
    groups: dict[str, tuple[Grant, ...]]

    def resolved(self) -> Directory:
        """The same, each user's ``grants`` filled in: its own, its groups', everyone's."""
        everyone = self.groups.get(EVERYONE, ())
        users = {
            name: replace(user, grants=self._grants(user.permissions, user.groups) + everyone)
            for name, user in self.users.items()
        }
        return Directory(users, self.groups)

    def _grants(self, own: tuple[Grant, ...], groups: Iterable[str]) -> tuple[Grant, ...]:
        grants = list(own)
        for group in groups:
            grants.extend(self.groups.get(group, ()))
        return tuple(grants)

    def anonymous(self) -> User:
        """Who a connection without a login is (``Security.allowanonymous``): no name, no
        password, the permissions of the groups ``anonymous`` and ``everyone``."""
        grants = self.groups.get(ANONYMOUS, ()) + self.groups.get(EVERYONE, ())
        return User("", ROLES[-1], "", (ANONYMOUS,), (), grants)


class UsersFile:
    """The users file of a data folder: read, and rewritten whole on every change."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / USERS_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, User]:
        """Every user by name, with its grants resolved; none if there is no file."""
        return self.read().users

    def read(self) -> Directory:
        """The users and groups, each user's grants resolved; empty if there is no file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return Directory({}, {})
        except OSError as error:
            raise UsersFileError(f"{self.path}: {error.strerror}") from None
        try:
            document = json.loads(text)
            version = document.get("version")
            if version not in READABLE_VERSIONS:
                raise UsersFileError(
                    f"{self.path}: format version {version!r}, this server reads "
                    f"{' and '.join(map(str, READABLE_VERSIONS))}"
                )
            users = {}
            for name, entry in document["users"].items():
                check_name(name)
                if entry["role"] not in ROLES:
                    raise ValueError(f"user {name!r}: role {entry['role']!r} is not one of {ROLES}")
                groups = tuple(entry.get("groups", ()))
                for group in groups:
                    check_name(group)
                users[name] = User(
                    name,
                    entry["role"],
                    str(entry["password"]),
                    groups,
                    _grants(entry.get("permissions", {}), f"user {name!r}"),
                )
            groups_read = {}
            for name, entry in document.get("groups", {}).items():
                check_name(name)
                groups_read[name] = _grants(entry.get("permissions", {}), f"group {name!r}")
            return Directory(users, groups_read).resolved()
        except UsersFileError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise UsersFileError(f"{self.path}: not a valid users file: {error}") from None

    def write(self, directory: Directory) -> None:
        """Write every user and group, atomically (a reader never sees half a file),
        readable by its owner only."""
        document = {
            "version": FORMAT_VERSION,
            "users": {
                user.name: {
                    "role": user.role,
                    "password": user.password_hash,
                    **({"groups": list(user.groups)} if user.groups else {}),
                    **({"permissions": _words(user.permissions)} if user.permissions else {}),
                }
                for user in sorted(directory.users.values(), key=lambda u: u.name)
            },
            "groups": {
                name: {"permissions": _words(grants)}
                for name, grants in sorted(directory.groups.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{USERS_FILE}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)

    def set(
        self, name: str, password: str, role: str | None, groups: Iterable[str] | None = None
    ) -> bool:
        """Add a user or change one's password (and role and groups, if given); True if
        added."""
        check_name(name)
        if not password:
            raise ValueError("the password is empty")
        directory = self.read()
        old = directory.users.get(name)
        if role is None and old is None:
            raise ValueError(f"user {name!r} is new: give its role ({', '.join(ROLES)})")
        chosen = role if role is not None else old.role  # type: ignore[union-attr]
        if chosen not in ROLES:
            raise ValueError(f"role {chosen!r} is not one of {', '.join(ROLES)}")
        member_of = _group_names(groups) if groups is not None else ()
        if old is not None:
            member_of = member_of if groups is not None else old.groups
            user = replace(old, role=chosen, password_hash=hash_password(password))
        else:
            user = User(name, chosen, hash_password(password))
        directory.users[name] = replace(user, groups=member_of)
        self.write(directory)
        return old is None

    def delete(self, name: str) -> bool:
        """Remove a user; False if there was none of that name."""
        directory = self.read()
        if directory.users.pop(name, None) is None:
            return False
        self.write(directory)
        return True

    def change(
        self, name: str, role: str | None = None, groups: Iterable[str] | None = None
    ) -> None:
        """Change a user's role and groups (those given), keeping its password."""
        directory = self.read()
        user = self._user(directory, name)
        if role is not None and role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        directory.users[name] = replace(
            user,
            role=role if role is not None else user.role,
            groups=_group_names(groups) if groups is not None else user.groups,
        )
        self.write(directory)

    def grant(self, user: str | None, group: str | None, pattern: str, words: list[str]) -> None:
        """Give a user (or a group) ``words`` (permission names) on ``pattern``."""
        self._change(user, group, pattern, lambda bits: bits | permission_bits(words))

    def set_permissions(
        self, user: str | None, group: str | None, pattern: str, words: list[str]
    ) -> bool:
        """Give a user (or a group) exactly ``words`` on ``pattern`` (none: the grant goes);
        False if that was so already."""
        return self._change(user, group, pattern, lambda bits: permission_bits(words))

    def revoke(
        self, user: str | None, group: str | None, pattern: str, words: list[str] | None
    ) -> bool:
        """Take ``words`` (every permission if None) on ``pattern`` back from a user or a
        group; False if it had none of them."""
        taken = permission_bits(words) if words is not None else permission_bits([ADMIN])
        return self._change(user, group, pattern, lambda bits: bits & ~taken)

    def _change(self, user: str | None, group: str | None, pattern: str, change: Any) -> bool:
        """Apply ``change`` to the bits of the grant on ``pattern`` of a user or a group."""
        if (user is None) == (group is None):
            raise ValueError("name a user or a group")
        directory = self.read()
        if user is not None:
            owner = self._user(directory, user)
            grants = owner.permissions
        else:
            assert group is not None
            check_name(group)
            grants = directory.groups.get(group, ())
        by_pattern = {g.pattern: g.bits for g in grants}
        before = by_pattern.get(pattern, 0)
        after = change(before)
        if after == before:
            return False
        by_pattern[pattern] = after
        changed = tuple(Grant.of(p, bit_names(b)) for p, b in by_pattern.items() if b)
        if user is not None:
            directory.users[user] = replace(owner, permissions=changed)
        elif changed:
            directory.groups[group] = changed  # type: ignore[index]
        else:
            directory.groups.pop(group, None)  # type: ignore[arg-type]
        self.write(directory)
        return True

    def _user(self, directory: Directory, name: str) -> User:
        user = directory.users.get(name)
        if user is None:
            raise ValueError(f"no user {name!r} in {self.path}")
        return user


def _grants(entry: dict[str, list[str]], owner: str) -> tuple[Grant, ...]:
    """The grants of a ``permissions`` mapping (pattern -> permission names)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{owner}: permissions must map destination patterns to lists")
    grants = []
    for pattern, words in entry.items():
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{owner}: permissions of {pattern!r} must be a list of names")
        try:
            grants.append(Grant.of(pattern, words))
        except ValueError as error:
            raise ValueError(f"{owner}: {error}") from None
    return tuple(grants)


def _words(grants: Iterable[Grant]) -> dict[str, list[str]]:
    return {grant.pattern: grant.permissions for grant in grants}


def _group_names(groups: Iterable[str]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(g.strip() for g in groups if g.strip()))
    for name in names:
        check_name(name)
    return names


class Users:
    """The users as the running server knows them: the file read again when it changed."""

    def __init__(self, users_file: UsersFile) -> None:
        self.file = users_file
        # The file as last read: its inode (each write replaces the file), time and size.
        self._stamp: tuple[int, int, int] | None = None
        self._directory = Directory({}, {})
        self._anonymous = self._directory.anonymous()
        self.generation = 0  # counts the changes read, so that what was derived is redone
        self.refresh()

    def refresh(self) -> bool:
        """Read the file again if it changed since it was last read (or appeared, or went);
        True if it did.

        A file that became invalid keeps the users last read, and the error is raised
        for the caller to report, once: the file is read again when it changes again."""
        try:
            status = self.file.path.stat()
            stamp: tuple[int, int, int] | None = (
                status.st_ino,
                status.st_mtime_ns,
                status.st_size,
            )
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        directory = self.file.read() if stamp is not None else Directory({}, {})
        self._directory = directory
        self._anonymous = directory.anonymous()
        self.generation += 1
        return True

    @property
    def configured(self) -> bool:
        """Whether a users file exists (logins are then required where configured)."""
        return self._stamp is not None

    def get(self, name: str) -> User | None:
        return self._directory.users.get(name)

    @property
    def anonymous(self) -> User:
        """Who a connection without a login is (see ``Directory.anonymous``)."""
        return self._anonymous

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if ``password`` is theirs, else None."""
        user = self._directory.users.get(name)
        if user is None:
            verify_password(password, _UNKNOWN_USER)  # as slow as a known name: no oracle
            return None
        return user if user.verify(password) else None

    def __iter__(self) -> Iterator[User]:
        return iter(self._directory.users.values())

    def __len__(self) -> int:
        return len(self._directory.users)
