"""The transaction discard strategies and order qualifiers, for any open transactions.

Every strategy with every order qualifier, on any set of open transactions
(standard and XA, prepared, timed out) and any limit: nothing chosen that the
strategy or order excludes, prepared branches never, timed-out unprepared ones
always, the rest in the strategy's order with the kinds taking turns as the
qualifier says, and the limit met after the discard whenever it can be, with
nothing discarded beyond what meeting it takes (except under ALL).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wiremq.config.parameters import ORDERS, STRATEGIES
from wiremq.modules.memory.txmemory import Candidate, choose, ordered

candidates = st.lists(
    st.builds(
        Candidate,
        key=st.integers(),
        xa=st.booleans(),
        nbytes=st.integers(0, 5000),
        messages=st.integers(0, 50),
        started=st.integers(0, 100).map(float),
        prepared=st.booleans(),
        timed_out=st.booleans(),
    ).map(lambda c: c if c.xa else Candidate(c.key, False, c.nbytes, c.messages, c.started)),
    max_size=12,
    unique_by=lambda c: c.key,
)


def allowed(candidate: Candidate, strategy: str, order: str) -> bool:
    """Whether the strategy and order let ``candidate`` be discarded at all."""
    if candidate.prepared or strategy == "NONE":
        return False
    return not (order == "ONLYXA" and not candidate.xa) and not (
        order == "ONLYSTANDARD" and candidate.xa
    )


EXHAUSTIVE = settings(max_examples=400, deadline=None)


@EXHAUSTIVE
@given(
    candidates,
    st.integers(0, 30000),
    st.sampled_from(STRATEGIES),
    st.sampled_from(ORDERS),
)
def test_the_choice_keeps_every_rule(open_transactions, limit, strategy, order):
    total = sum(c.nbytes for c in open_transactions)
    chosen = choose(open_transactions, total, limit, strategy, order)
    assert len({c.key for c in chosen}) == len(chosen), "a transaction chosen twice"
    if total <= limit:
        assert chosen == []
        return
    timed_out = [c for c in open_transactions if c.timed_out and not c.prepared]
    assert chosen[: len(timed_out)] == timed_out, "timed-out branches go first, all of them"
    rest = chosen[len(timed_out) :]
    assert not any(c.prepared for c in chosen), "a prepared branch is never discarded"
    assert all(allowed(c, strategy, order) for c in rest), "excluded by strategy or order"
    remaining = total - sum(c.nbytes for c in chosen)
    others = [c for c in open_transactions if not c.timed_out and not c.prepared]
    could_free = sum(c.nbytes for c in others if allowed(c, strategy, order))
    if strategy == "ALL":
        assert rest == [c for c in ordered(others, strategy, order)]
    elif total - sum(c.nbytes for c in timed_out) - could_free <= limit:
        assert remaining <= limit, "the limit is met whenever it can be"
    if rest and strategy != "ALL":
        # Nothing beyond what meeting the limit takes: before the last one went, it was not met.
        assert remaining + rest[-1].nbytes > limit
    assert rest == ordered(others, strategy, order)[: len(rest)], "in the strategy's order"


@EXHAUSTIVE
@given(candidates, st.sampled_from(STRATEGIES), st.sampled_from(ORDERS))
def test_each_kind_goes_in_the_strategys_order(open_transactions, strategy, order):
    sequence = ordered(open_transactions, strategy, order)
    for xa in (False, True):
        kind = [c for c in sequence if c.xa is xa]
        pairs = list(zip(kind, kind[1:], strict=False))
        if strategy == "MAXBYTES":
            assert all(a.nbytes >= b.nbytes for a, b in pairs)
        elif strategy == "MAXMESSAGES":
            assert all(a.messages >= b.messages for a, b in pairs)
        elif strategy in ("OLDESTTX", "ALL"):
            assert all(a.started <= b.started for a, b in pairs)
        elif strategy == "YOUNGESTTX":
            assert all(a.started >= b.started for a, b in pairs)
    if strategy == "NONE":
        assert sequence == []


@EXHAUSTIVE
@given(candidates, st.sampled_from([s for s in STRATEGIES if s != "NONE"]))
def test_the_order_qualifier_says_how_the_kinds_take_turns(open_transactions, strategy):
    kinds = {order: [c.xa for c in ordered(open_transactions, strategy, order)] for order in ORDERS}
    xa_count = sum(c.xa for c in open_transactions)
    standard_count = len(open_transactions) - xa_count
    assert kinds["ONLYXA"] == [True] * xa_count
    assert kinds["ONLYSTANDARD"] == [False] * standard_count
    assert kinds["FIRSTXA"] == [True] * xa_count + [False] * standard_count
    assert kinds["FIRSTSTANDARD"] == [False] * standard_count + [True] * xa_count
    for order, first in (("MIXEDFIRSTXA", True), ("MIXEDFIRSTSTANDARD", False)):
        both = min(xa_count, standard_count)
        alternating = [first, not first] * both
        leftover = [xa_count > standard_count] * abs(xa_count - standard_count)
        assert kinds[order] == alternating + leftover


def test_the_manuals_default_discards_the_largest_standard_transaction_first():
    small = Candidate(1, False, 100, 1, 1.0)
    large = Candidate(2, False, 900, 1, 2.0)
    branch = Candidate(3, True, 5000, 1, 0.0)
    assert choose([small, large, branch], 6000, 5500, "MAXBYTES", "MIXEDFIRSTSTANDARD") == [large]
    assert choose([small, large, branch], 6000, 5500, "MAXBYTES", "MIXEDFIRSTXA") == [branch]
