"""The JSON API's message life story: a message's journal records, in order, by its id.

The lookup (``modules/journal/index.py``) reads files, so it runs on a thread, once the
journal's writer has written every record made before the request; the records shown
are those of destinations the caller may read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet import defer, threads

from wiremq.admin.routes import VIEWER, Call, HttpError, Route
from wiremq.modules.journal.index import JournalIndex
from wiremq.modules.journal.recorder import RecordingJournal
from wiremq.modules.security.permissions import READ
from wiremq.server.app import JOURNAL_FOLDER, WiremqServer


class StoryApi:
    """``GET /api/messages/{message}/story`` for one server's journal."""

    def __init__(self, server: WiremqServer, data: Path) -> None:
        self.server = server
        self.index = JournalIndex(data / JOURNAL_FOLDER, self._being_written)

    def _being_written(self) -> Path | None:
        journal = self.server.core.journal if self.server.core is not None else None
        return journal.files.current if isinstance(journal, RecordingJournal) else None

    def story(self, call: Call) -> defer.Deferred[dict[str, Any]]:
        message_id = call.params["message"]

        def answer(found: Any) -> dict[str, Any]:
            shown = [r for r in found.records if call.may(READ, str(r.get("destination", "")))]
            if not found.records:
                raise HttpError(404, f"the journal has no record of message {message_id!r}")
            if not shown:
                raise HttpError(403, f"permission denied: read the destinations of {message_id}")
            return {
                "message_id": message_id,
                "records": shown,
                "hidden": len(found.records) - len(shown),
                "files": found.files,
                "indexed": found.indexed,
                "lines_read": found.lines_read,
                "seconds": round(found.seconds, 4),
            }

        written: defer.Deferred[None] = defer.Deferred()
        core = self.server.core
        if core is None:
            written.callback(None)
        else:  # the story holds every record made before it was asked for
            core.journal.written(lambda: written.callback(None))
        written.addCallback(lambda _: threads.deferToThread(self.index.story, message_id))
        return written.addCallback(answer)

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET",
                "/api/messages/{message}/story",
                VIEWER,
                self.story,
                "a message's life story: its audit journal records in the order written, "
                "across journal files (received, stored, delivered to which subscription, "
                "acknowledged, expired, dead-lettered, moved... with times); only those of "
                "destinations you may read",
                "messages",
                errors=(404,),
            )
        ]
