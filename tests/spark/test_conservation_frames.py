"""The conservation audit's functions on small hand-made journals."""

from __future__ import annotations

from typing import Any

from tests.spark.conftest import journal_frame, record, snapshot_frame
from wiremq.analytics import conservation

Q, T, DMQ = "/queue/q", "/topic/t", "/queue/DMQ"


def msg(message_id: str, destination: str = Q, **more: Any) -> dict[str, Any]:
    return {"message_id": message_id, "destination": destination, "size": 3, **more}


def sub(session: str = "s1", subscription: str = "0") -> dict[str, Any]:
    return {"session": session, "subscription": subscription}


def received(message_id: str, destination: str = Q, **more: Any) -> dict[str, Any]:
    return record("received", 1, **msg(message_id, destination, expires=0, **more))


def delivered(message_id: str, destination: str = Q, s: str = "s1", n: str = "0") -> dict:
    return record("delivered", 2, **msg(message_id, destination), **sub(s, n), ack="client")


def acknowledged(message_id: str, destination: str = Q, s: str = "s1", n: str = "0") -> dict:
    return record("acknowledged", 3, **msg(message_id, destination), **sub(s, n))


def verdicts(spark: Any, records: list[dict[str, Any]], stored: list[dict] | None = None):
    journal = journal_frame(spark, records)
    snapshot = snapshot_frame(spark, stored) if stored is not None else None
    rows = conservation.audit(journal, snapshot, 4).collect()
    return {(r["message_id"], r["destination"]): r for r in rows}


def fate(result: dict, message_id: str, destination: str = Q) -> tuple[str, str | None, list]:
    row = result[(message_id, destination)]
    return row["fate"], row["reason"], list(row["problems"])


def test_each_fate_of_a_queue_message(spark):
    records = [
        *(received(m) for m in ("acked", "expired", "nacked", "discarded", "refused", "stored")),
        delivered("acked"),
        acknowledged("acked"),
        record("expired", 5, **msg("expired", store="volqueue", expires=4)),
        delivered("nacked"),
        record("nacked", 4, **msg("nacked"), **sub(), requeue=False),
        record("discarded", 4, **msg("discarded"), reason="transaction-aborted"),
        record("refused", 1, **msg("refused"), reason="spool quota exceeded"),
        record("stored", 2, **msg("stored", persistent=True), store="persqueue", seq=7),
    ]
    result = verdicts(spark, records, [{"message_id": "stored", "destination": Q}])
    assert fate(result, "acked") == ("acknowledged", None, [])
    assert fate(result, "expired") == ("expired", None, [])
    assert fate(result, "nacked") == ("discarded", "nacked", [])
    assert fate(result, "discarded") == ("discarded", "transaction-aborted", [])
    assert fate(result, "refused") == ("refused", "spool quota exceeded", [])
    assert fate(result, "stored") == ("still_stored", None, [])


def test_a_message_moved_to_the_dead_message_queue_lives_on_there(spark):
    records = [
        received("m", persistent=True),
        record("stored", 2, **msg("m"), store="persqueue", seq=1),
        record("expired", 5, **msg("m"), store="persqueue", dmq=DMQ, run="r1", expires=4),
        record("removed", 5, **msg("m"), store="persqueue", run="r1", expires=4),
        record("dead_lettered", 5, **msg("m"), dmq=DMQ, reason="expired"),
        record("stored", 5, **msg("m", DMQ), store="persqueue", seq=1),
        received("m", DMQ),
        delivered("m", DMQ),
        acknowledged("m", DMQ),
    ]
    result = verdicts(spark, records, [])
    assert fate(result, "m") == ("dead_lettered", None, [])
    assert fate(result, "m", DMQ) == ("acknowledged", None, [])


def test_what_an_operator_moves_purges_and_deletes(spark):
    elsewhere = "/queue/elsewhere"
    records = [
        received("m", persistent=True),
        record("stored", 2, **msg("m"), store="persqueue", seq=1),
        record("moved", 3, **msg("m"), to=elsewhere),
        record("stored", 3, **msg("m", elsewhere), store="persqueue", seq=2),
        received("m", elsewhere),
        delivered("m", elsewhere),
        acknowledged("m", elsewhere),
        received("p"),
        record("discarded", 3, **msg("p"), reason="purged"),
        received("twice"),
        record("moved", 3, **msg("twice"), to=elsewhere),
        record("moved", 4, **msg("twice"), to=elsewhere),
        received("twice", elsewhere),
        received("gone"),
        record("moved", 3, **msg("gone"), to=elsewhere),
        delivered("gone"),
        acknowledged("gone"),
    ]
    result = verdicts(spark, records, [])
    assert fate(result, "m") == ("moved", None, [])
    assert fate(result, "m", elsewhere) == ("acknowledged", None, [])
    assert fate(result, "p") == ("discarded", "purged", [])
    assert fate(result, "twice")[2] == ["moved more than once"]
    assert fate(result, "gone")[2] == ["fates that cannot go together: moved, acknowledged"]


def test_redeliveries_nacks_and_an_acknowledgement_undone_by_a_failed_transaction(spark):
    records = [
        received("m"),
        delivered("m", s="s1"),
        record("nacked", 3, **msg("m"), **sub("s1"), requeue=True),
        record("redelivered", 4, **msg("m"), **sub("s2"), ack="client"),
        acknowledged("m", s="s2"),
        record("unacknowledged", 5, **msg("m"), **sub("s2"), reason="transaction-failed"),
        record("redelivered", 6, **msg("m"), **sub("s2"), ack="client"),
        acknowledged("m", s="s2"),
    ]
    assert fate(verdicts(spark, records), "m") == ("acknowledged", None, [])


def consumed(message_id: str, destination: str = Q, s: str = "s1", n: str = "0") -> dict:
    return record("consumed", 3, **msg(message_id, destination), **sub(s, n), redelivered=False)


def test_an_auto_mode_consumption_is_a_delivery_and_its_acknowledgement(spark):
    records = [
        received("m"),
        consumed("m"),
        received("back"),  # an auto subscriber left before it was written: given back
        delivered("back", s="s1"),
        record("requeued", 3, **msg("back"), **sub("s1"), reason="subscriber-left"),
        consumed("back", s="s2"),
        received("news", T),
        consumed("news", T, s="s1"),
        consumed("news", T, s="s2"),
        received("both"),  # consumed, and then given back as well: settled twice
        consumed("both"),
        record("requeued", 4, **msg("both"), **sub("s1"), reason="subscriber-left"),
    ]
    result = verdicts(spark, records)
    assert fate(result, "m") == ("acknowledged", None, [])
    assert fate(result, "back") == ("acknowledged", None, [])
    assert fate(result, "news", T) == ("acknowledged", None, [])
    assert fate(result, "both")[2] == ["settled more often than delivered to s1/0"]


def unexplained_cases(m: str) -> dict[str, tuple[list[dict], str]]:
    """Journals of a message ``m`` that is not explained, and the problem each names."""

    def renamed(records: list[dict], case: str) -> list[dict]:
        return [{**r, "message_id": f"{m}-{case}"} for r in records]

    cases = {
        "no-fate": ([received(m)], "no fate"),
        "unsettled": ([received(m), delivered(m)], "delivery to s1/0 never settled"),
        "ack-without-delivery": (
            [received(m), acknowledged(m)],
            "acknowledged without a delivery to s1/0",
        ),
        "acked-twice-one-delivery": (
            [received(m), delivered(m), acknowledged(m), acknowledged(m)],
            "settled more often than delivered to s1/0",
        ),
        "acked-by-two": (
            [
                received(m),
                delivered(m, s="s1"),
                acknowledged(m, s="s1"),
                delivered(m, s="s2"),
                acknowledged(m, s="s2"),
            ],
            "acknowledged more than once",
        ),
        "expired-and-acked": (
            [
                received(m),
                delivered(m),
                acknowledged(m),
                record("expired", 5, **msg(m), store="volqueue", expires=4),
            ],
            "fates that cannot go together: expired, acknowledged",
        ),
        "removed-not-expired": (
            [
                received(m),
                delivered(m),
                acknowledged(m),
                record("removed", 5, **msg(m), store="persqueue", run="r", expires=4),
            ],
            "removed by a cleanup run, yet never expired",
        ),
        "no-received": ([delivered(m), acknowledged(m)], "no received record"),
        "received-twice": (
            [received(m), received(m), delivered(m), acknowledged(m)],
            "received more than once",
        ),
    }
    return {case: (renamed(records, case), problem) for case, (records, problem) in cases.items()}


def test_a_message_that_is_not_explained_is_named_with_its_problem(spark):
    cases = unexplained_cases("m")
    result = verdicts(spark, [r for records, _ in cases.values() for r in records])
    assert len(result) == len(cases)
    for case, (_, problem) in cases.items():
        verdict, _, problems = fate(result, f"m-{case}")
        assert verdict == conservation.UNEXPLAINED, case
        assert any(p.startswith(problem) for p in problems), (case, problems)


def test_topic_messages_end_with_each_subscriber(spark):
    records = [
        received("fanout", T),
        delivered("fanout", T, s="a"),
        acknowledged("fanout", T, s="a"),
        delivered("fanout", T, s="b"),
        record("discarded", 4, **msg("fanout", T), **sub("b"), reason="egress-discard-oldest"),
        received("nobody", T),
        record("discarded", 2, **msg("nobody", T), reason="no-subscribers"),
        received("lost", T),
        delivered("lost", T, s="a"),
        record("discarded", 4, **msg("lost", T), **sub("a"), reason="subscriber-left"),
        received("durable", T, persistent=True),
        delivered("durable", T, s="a"),
        acknowledged("durable", T, s="a"),
        received("stuck", T),
        delivered("stuck", T, s="a"),
        acknowledged("stuck", T, s="a"),
        delivered("stuck", T, s="b"),
    ]
    stored = [{"message_id": "durable", "destination": T}]
    result = verdicts(spark, records, stored)
    assert fate(result, "fanout", T) == ("acknowledged", None, [])
    assert fate(result, "nobody", T) == ("discarded", "no-subscribers", [])
    assert fate(result, "lost", T) == ("discarded", "subscriber-left", [])
    assert fate(result, "durable", T) == ("still_stored", None, [])
    assert fate(result, "stuck", T) == (
        conservation.UNEXPLAINED,
        None,
        ["delivery to b/0 never settled"],
    )


def test_the_summary_counts_each_message_once(spark):
    records = [
        received("a"),
        delivered("a"),
        acknowledged("a"),
        received("b"),
        record("expired", 5, **msg("b"), store="volqueue", expires=4),
        received("c"),
        record("expired", 5, **msg("c"), dmq=DMQ, store="volqueue", expires=4),
        record("dead_lettered", 5, **msg("c"), dmq=DMQ, reason="expired"),
        received("c", DMQ),
        received("d"),
    ]
    journal = journal_frame(spark, records)
    audited = conservation.audit(journal, snapshot_frame(spark, []), 4)
    summary = conservation.summary(audited).first().asDict()
    assert summary == {
        "messages": 5,
        "received": 5,
        "refused": 0,
        "still_stored": 0,
        "dead_lettered": 1,
        "moved": 0,
        "expired": 1,
        "acknowledged": 1,
        "discarded": 0,
        "lost": 0,
        "unexplained": 2,  # d, and c's copy: neither has a fate
    }
    named = [
        (r["message_id"], r["destination"]) for r in conservation.unexplained(audited).collect()
    ]
    assert sorted(named) == [("c", DMQ), ("d", Q)]
    by_destination = {r["destination"]: r for r in conservation.by_destination(audited).collect()}
    assert by_destination[Q]["messages"] == 4 and by_destination[Q]["unexplained"] == 1


# -- across server runs and the nodes of an HA pair -------------------------------------------


def on(run: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A record as the run ``run`` wrote it (its file's name says so)."""
    return {**entry, "server_run": run}


def runs(*runs: tuple[str, bool]) -> list[dict[str, Any]]:
    """Each run's server_started, and its server_stopped if it stopped cleanly."""
    found = []
    for run, stopped in runs:
        found.append(on(run, record("server_started", 0, server=run)))
        if stopped:
            found.append(on(run, record("server_stopped", 99, server=run)))
    return found


def test_a_message_received_on_a_killed_node_and_acknowledged_on_the_next_is_explained(spark):
    records = [
        *runs(("aaaa0001", False), ("bbbb0002", True)),
        on("aaaa0001", received("m", persistent=True)),
        on("aaaa0001", record("stored", 2, **msg("m", persistent=True), store="persqueue", seq=1)),
        on("aaaa0001", delivered("m", s="a-s1")),  # never settled: its node was killed
        on("bbbb0002", record("redelivered", 10, **msg("m"), **sub("b-s1", "0"), ack="client")),
        on("bbbb0002", acknowledged("m", s="b-s1")),
    ]
    assert fate(verdicts(spark, records, []), "m") == ("acknowledged", None, [])


def test_an_acknowledgement_whose_removal_died_with_its_node_does_not_count(spark):
    records = [
        *runs(("aaaa0001", False), ("bbbb0002", True)),
        on("aaaa0001", received("m", persistent=True)),
        on("aaaa0001", delivered("m", s="a-s1")),
        on("aaaa0001", acknowledged("m", s="a-s1")),  # its removal never committed
        on("bbbb0002", record("redelivered", 10, **msg("m"), **sub("b-s1", "0"), ack="client")),
        on("bbbb0002", acknowledged("m", s="b-s1")),
    ]
    assert fate(verdicts(spark, records, []), "m") == ("acknowledged", None, [])
    # The same on a run that stopped cleanly: acknowledged twice, which cannot be.
    clean = [r for r in records if r["event"] != "server_started"] + runs(
        ("aaaa0001", True), ("bbbb0002", True)
    )
    found, _, problems = fate(verdicts(spark, clean, []), "m")
    assert found == "unexplained" and "acknowledged more than once" in problems


def test_what_a_node_held_and_no_store_did_is_lost_with_it_and_nothing_else_is(spark):
    records = [
        *runs(("aaaa0001", False), ("cccc0003", True)),
        on("aaaa0001", received("volatile")),
        on("aaaa0001", delivered("volatile", s="a-s1")),
        on("aaaa0001", received("never committed", persistent=True)),
        on("aaaa0001", received("committed", persistent=True)),
        on("aaaa0001", record("stored", 2, **msg("committed"), store="persqueue", seq=1)),
        on("cccc0003", received("clean run")),
    ]
    result = verdicts(spark, records, [])
    assert fate(result, "volatile") == ("lost", "ended-with-its-server", [])
    assert fate(result, "never committed") == ("lost", "ended-with-its-server", [])
    # A stored message that no later run delivered and no snapshot holds is not explained.
    assert fate(result, "committed") == ("unexplained", None, ["no fate"])
    assert fate(result, "clean run") == ("unexplained", None, ["no fate"])
