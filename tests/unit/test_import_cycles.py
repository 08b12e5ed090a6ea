"""Import cycles, type-hint-only imports included (``tests/import_graph.py``): none but the
data model's, and that one does not spread."""

from __future__ import annotations

from tests.import_graph import cycles, graph

# The data model's knot, not untied yet: a message names its destination (``Message.target``);
# destinations hand messages to subscriptions, and the journal and the store name those
# back; destinations import the chain's ``Batch`` and domain names while the chain's
# ``ModuleContext`` names the destinations' registry, the spool, the journal, the store and
# the transaction manager. Untying it is the destinations' own work.
DATA_MODEL = (
    "wiremq.modules.message",
    "wiremq.modules.destinations.",
    "wiremq.modules.pipeline.chain",
    "wiremq.modules.pipeline.transaction",
    "wiremq.modules.journal.recorder",
    "wiremq.modules.persistence.store",
    "wiremq.modules.flow.spool",
    "wiremq.modules.memory.workpool",
)


def test_the_import_graph_is_read_and_its_cycles_found():
    edges = graph()
    assert "wiremq.modules.client.connection" in edges["wiremq.modules.core"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_reaches_beyond_the_data_model():
    for component in cycles(graph()):
        outside = [name for name in component if not name.startswith(DATA_MODEL)]
        assert outside == [], f"an import cycle through {outside}: {component}"
