"""Opening a store's root in its database: a session on a ``LogSet`` of the layout this
code reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ZODB import DB

from .errors import StoreOpenError
from .model import LogSet
from .session import Session

RootT = TypeVar("RootT", bound=LogSet)


def open_session(db: DB, root_name: str, new_root: Callable[[], RootT]) -> Session[RootT]:
    """A session on a store's root, refused if the root was written in another layout."""
    session: Session[RootT] = Session(db, root_name, new_root)
    with session.read() as logs:
        layout = logs.layout
    if layout != LogSet.LAYOUT:
        session.close()
        raise StoreOpenError(
            f"the {root_name!r} store was written in layout {layout} by an older "
            f"wiremq; this one reads layout {LogSet.LAYOUT}. Drain it with the older "
            "version, or move its data away to start empty."
        )
    return session
