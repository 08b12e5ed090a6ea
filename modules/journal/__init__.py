"""The audit journal: one JSON Lines record per message life event (see docs/journal.md)."""
