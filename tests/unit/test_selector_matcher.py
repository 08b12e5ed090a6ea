"""A queue's ``Matcher``: the one generated function that lists the filters a message
matches agrees with each filter's own selector, inline or by an index, as filters come and
go, with SQL's unknown (absent headers, text that is no number) kept."""

from __future__ import annotations

import itertools

from tests.unit.test_selector_grammar import Msg
from wiremq.modules.destinations.filters import INLINE, Filter, Matcher
from wiremq.modules.destinations.levels import Levels
from wiremq.modules.selector import compile_selector

SHARDS = INLINE + 4  # more than a header tests inline: looked up by value

SELECTORS = [
    *(f"shard = {n} AND price > 100" for n in range(SHARDS)),  # indexed by number
    *(f"region = '{r}' AND price > 100" for r in ("EU", "US")),  # by text, inline
    "region = 'EU'",
    "kind = 3",
    "kind = 'x' OR price < 10",  # no equality at the top: tested in turn
    "price > 100",
    "NOT (price > 100)",
    "price IS NULL",
    "tag LIKE 'a%' AND c IN ('a', 'b')",
    "NOT (tag LIKE 'a%')",
    "a = b",
    "JMSPriority > 5 AND region <> 'EU'",
]

HEADERS = {
    "shard": [None, "0", "3", "3.0", str(SHARDS - 1), str(SHARDS), "x"],
    "region": [None, "EU", "US", "eu"],
    "price": [None, "150", "5", "abc", "1e3"],
    "kind": [None, "3", "3.0", "x"],
    "tag": [None, "abc", "b"],
    "c": [None, "a", "z"],
}


def _messages() -> list[Msg]:
    """Every header's values in turn, with the others varied along (not the whole
    product: a few hundred messages reach every case)."""
    names = list(HEADERS)
    messages = []
    for n, values in enumerate(itertools.product(*(HEADERS[k][:3] for k in names))):
        headers = {k: v for k, v in zip(names, values, strict=True) if v is not None}
        messages.append(Msg(headers, priority=n % 10))
    for name, values in HEADERS.items():
        for value in values:
            for price in HEADERS["price"]:
                headers = {"price": price} if price is not None else {}
                if value is not None:
                    headers[name] = value
                messages.append(Msg({**headers, "a": "7", "b": "7.0"}))
    return messages


def _check(matcher: Matcher, filters: list[Filter], messages: list[Msg]) -> None:
    for message in messages:
        found = matcher.matching(message)
        expected = [f for f in filters if f.match(message)]
        assert len(found) == len(set(found)), message  # each filter once
        assert set(found) == set(expected), (message, found, expected)


def test_the_matcher_agrees_with_every_selector_as_filters_come_and_go():
    """Inline while few, by the index when more, and back (checked at every step)."""
    messages = _messages()
    matcher = Matcher()
    filters: list[Filter] = []
    for text in SELECTORS:
        filter_: Filter = Filter(compile_selector(text), Levels(home=False))
        matcher.add(filter_)
        filters.append(filter_)
        _check(matcher, filters, messages[:: 7 if len(filters) < len(SELECTORS) else 1])
    assert matcher.matching == matcher._indexed and len(matcher.indexed["shard"][1]) == SHARDS
    for filter_ in [*filters[::2], *filters[1::2]]:
        matcher.remove(filter_)
        filters.remove(filter_)
        _check(matcher, filters, messages[::5])
        assert (matcher.matching == matcher._indexed) is (len(filters) > INLINE)
    assert not matcher.indexed and not matcher.others
    assert all(matcher.matching(m) == [] for m in messages)


def test_a_few_selectors_are_tested_in_one_generated_function():
    matcher = Matcher()
    texts = ["region = 'EU' AND price > 100", "tag LIKE 'a%'", "c IN ('a', 'b')"]
    filters = [Filter(compile_selector(t), Levels(home=False)) for t in texts]
    for filter_ in filters:
        matcher.add(filter_)
    assert matcher.matching.__code__.co_filename == "<selector>"
    message = Msg({"region": "EU", "price": "150", "tag": "abc", "c": "z"})
    assert matcher.matching(message) == filters[:2]


def test_many_selectors_on_one_header_are_looked_up_by_its_value():
    matcher = Matcher()
    shards = [Filter(compile_selector(f"shard = {n}"), Levels(home=False)) for n in range(20)]
    for filter_ in shards:
        matcher.add(filter_)
    assert matcher.matching(Msg({"shard": "7"})) == [shards[7]]
    assert matcher.matching(Msg({"shard": "7.0"})) == [shards[7]]  # by number
    assert matcher.matching(Msg({})) == []
    assert matcher.matching(Msg({"shard": "seven"})) == []
