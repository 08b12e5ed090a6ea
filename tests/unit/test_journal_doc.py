"""docs/journal.md documents the journal's schema: every event, field and reason."""

from __future__ import annotations

from pathlib import Path

from wiremq.modules.journal import schema

DOC = (Path(__file__).resolve().parents[2] / "docs" / "journal.md").read_text()


def test_the_document_names_every_event_field_and_reason_of_the_schema():
    missing = [
        name
        for name in (*schema.EVENTS, *(f.name for f in schema.FIELDS), *schema.REASONS)
        if f"`{name}`" not in DOC
    ]
    assert missing == []
    assert f"schema version, now {schema.SCHEMA_VERSION}" in DOC
    for field in schema.FIELDS:
        assert f"| `{field.name}` | {field.type} |" in DOC, field.name
    for event in schema.EVENTS.values():
        assert f"| `{event.name}` |" in DOC, event.name
