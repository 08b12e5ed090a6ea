"""The server's users: names, roles and salted password hashes, in the data folder's users file.

One file, ``users.json`` in the data folder, serves the admin console and STOMP
logins alike. ``wiremq passwd`` writes it (atomically, readable by its owner
only); the server reads it at start and again whenever it changed, so a user
added while the server runs can log in at once. Passwords are kept as scrypt
hashes with a random salt per user, in a self-describing string
(``scrypt$n$r$p$salt$hash``), so that the cost can be raised later without
invalidating the hashes already stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USERS_FILE = "users.json"
FORMAT_VERSION = 1
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
    name: str
    role: str
    password_hash: str

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


class UsersFile:
    """The users file of a data folder: read, and rewritten whole on every change."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / USERS_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, User]:
        """Every user by name; none if there is no file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise UsersFileError(f"{self.path}: {error.strerror}") from None
        try:
            document = json.loads(text)
            if document.get("version") != FORMAT_VERSION:
                raise UsersFileError(
                    f"{self.path}: format version {document.get('version')!r}, "
                    f"this server reads {FORMAT_VERSION}"
                )
            users = {}
            for name, entry in document["users"].items():
                check_name(name)
                if entry["role"] not in ROLES:
                    raise ValueError(f"user {name!r}: role {entry['role']!r} is not one of {ROLES}")
                users[name] = User(name, entry["role"], str(entry["password"]))
            return users
        except UsersFileError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise UsersFileError(f"{self.path}: not a valid users file: {error}") from None

    def save(self, users: dict[str, User]) -> None:
        """Write every user, atomically (a reader never sees half a file), owner-only."""
        document = {
            "version": FORMAT_VERSION,
            "users": {
                user.name: {"role": user.role, "password": user.password_hash}
                for user in sorted(users.values(), key=lambda u: u.name)
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

    def set(self, name: str, password: str, role: str | None) -> bool:
        """Add a user or change one's password (and role, if given); True if added."""
        check_name(name)
        if not password:
            raise ValueError("the password is empty")
        users = self.load()
        old = users.get(name)
        if role is None and old is None:
            raise ValueError(f"user {name!r} is new: give its role ({', '.join(ROLES)})")
        chosen = role if role is not None else old.role  # type: ignore[union-attr]
        if chosen not in ROLES:
            raise ValueError(f"role {chosen!r} is not one of {', '.join(ROLES)}")
        users[name] = User(name, chosen, hash_password(password))
        self.save(users)
        return old is None

    def delete(self, name: str) -> bool:
        """Remove a user; False if there was none of that name."""
        users = self.load()
        if users.pop(name, None) is None:
            return False
        self.save(users)
        return True


class Users:
    """The users as the running server knows them: the file read again when it changed."""

    def __init__(self, users_file: UsersFile) -> None:
        self.file = users_file
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, User] = {}
        self.refresh()

    def refresh(self) -> None:
        """Read the file again if it changed since it was last read (or appeared, or went).

        A file that became invalid keeps the users last read, and the error is raised
        for the caller to report."""
        try:
            status = self.file.path.stat()
            stamp: tuple[int, int] | None = (status.st_mtime_ns, status.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        users = self.file.load() if stamp is not None else {}
        self._users, self._stamp = users, stamp

    @property
    def configured(self) -> bool:
        """Whether a users file exists (logins are then required where configured)."""
        return self._stamp is not None

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if ``password`` is theirs, else None."""
        user = self._users.get(name)
        if user is None:
            verify_password(password, _UNKNOWN_USER)  # as slow as a known name: no oracle
            return None
        return user if user.verify(password) else None

    def __iter__(self) -> Iterator[User]:
        return iter(self._users.values())

    def __len__(self) -> int:
        return len(self._users)
