"""No import cycles, type-hint-only imports included (``tests/import_graph.py``).

A cycle through type-hint-only imports does not fail at run time, but it says two
modules each need the other to be understood. Where a lower layer needs a few
attributes of a higher one it names a ``Protocol`` of its own (``message.Target``,
``subscription.Source``, ``recorder.JournaledSubscription``, ...)."""

from __future__ import annotations

from tests.import_graph import cycles, graph


def test_the_import_graph_is_read_and_its_cycles_found():
    edges = graph()
    assert "wiremq.modules.client.connection" in edges["wiremq.modules.core"]
    # type-hint-only imports count: the chain's context names the transaction manager
    assert "wiremq.modules.pipeline.transaction_manager" in edges["wiremq.modules.pipeline.chain"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_there_is_no_import_cycle():
    found = cycles(graph())
    assert found == [], f"import cycles: {found}"
