"""Property-based tests: a compiled selector says TRUE exactly when the reference
interpreter (``selector_interpreter.py``) computes TRUE, for random well-formed selectors
and random messages; and no text, however garbled, does anything but compile or raise
``SelectorError``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.selector_interpreter import evaluate
from tests.unit.test_selector_grammar import Msg
from wiremq.modules.selector import SelectorError, compile_selector
from wiremq.modules.selector.syntax import parse

NUMBERS = st.one_of(
    st.integers(-1000, 1000).map(str),
    st.sampled_from(["0", "7.", ".5", "2.5", "1E3", "3e-2", "0x1F", "010", "12L", "2.5f"]),
)
STRINGS = st.sampled_from(["''", "'x'", "'abc'", "'007'", "'7'", "'it''s'", "'true'", "'_%'"])
PROPERTIES = ("a", "b", "c", "s", "flag")
NUMERIC_FIELDS = ("JMSPriority", "JMSXDeliveryCount", "JMSTimestamp")
STRING_FIELDS = ("JMSType", "JMSCorrelationID", "JMSMessageID", "JMSDeliveryMode")
PATTERNS = st.sampled_from(
    ["'%'", "'a%'", "'_b_'", "'%7'", "'x!_%' ESCAPE '!'", "'!%%' ESCAPE '!'"]
)


def numeric(depth: int) -> st.SearchStrategy[str]:
    leaves = st.one_of(NUMBERS, st.sampled_from(PROPERTIES + NUMERIC_FIELDS))
    if depth == 0:
        return leaves
    inner = numeric(depth - 1)
    return st.one_of(
        leaves,
        inner.map(lambda x: f"-{x}"),
        st.tuples(inner, st.sampled_from("+-*/"), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    )


TEXT = st.one_of(STRINGS, st.sampled_from(PROPERTIES + STRING_FIELDS))


def condition(depth: int) -> st.SearchStrategy[str]:
    number = numeric(2)
    leaves = st.one_of(
        st.tuples(number, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), number).map(" ".join),
        st.tuples(TEXT, st.sampled_from(["=", "<>"]), TEXT).map(" ".join),
        st.tuples(
            st.sampled_from(PROPERTIES),
            st.sampled_from(["=", "<>", "<", ">="]),
            st.sampled_from(PROPERTIES),
        ).map(" ".join),
        st.tuples(number, st.sampled_from(["", "NOT "]), number, number).map(
            lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"
        ),
        st.tuples(
            st.sampled_from(PROPERTIES + STRING_FIELDS),
            st.sampled_from(["", "NOT "]),
            st.lists(STRINGS, min_size=1, max_size=3),
        ).map(lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(
            st.sampled_from(PROPERTIES + STRING_FIELDS), st.sampled_from(["", "NOT "]), PATTERNS
        ).map(lambda t: f"{t[0]} {t[1]}LIKE {t[2]}"),
        st.tuples(
            st.sampled_from(PROPERTIES + STRING_FIELDS + NUMERIC_FIELDS),
            st.sampled_from(["IS NULL", "IS NOT NULL"]),
        ).map(" ".join),
        st.sampled_from(["flag", "TRUE", "FALSE", "JMSRedelivered", "a"]),
    )
    if depth == 0:
        return leaves
    inner = condition(depth - 1)
    return st.one_of(
        leaves,
        inner.map(lambda c: f"NOT ({c})"),
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"
        ),
        st.tuples(inner, st.sampled_from(["= TRUE", "<> FALSE", "= FALSE"])).map(
            lambda t: f"({t[0]}) {t[1]}"
        ),
    )


VALUES = st.one_of(
    st.integers(-20, 20).map(str),
    st.sampled_from(["0", "7", "007", "7.0", "2.5", "1e2", "-.5", "x", "abc", "", "true", "FALSE"]),
    st.sampled_from(["1_0", " 1", "0x1F", "nan", "inf", "_b_", "a7", "x_a"]),
)

MESSAGES = st.builds(
    Msg,
    headers=st.dictionaries(
        st.sampled_from([*PROPERTIES, "type", "correlation-id"]), VALUES, max_size=7
    ),
    priority=st.integers(0, 9),
    timestamp=st.integers(0, 2000),
    message_id=st.sampled_from(["ID:1", "x", "abc"]),
    persistent=st.booleans(),
    redelivered=st.booleans(),
    redeliveries=st.integers(0, 3),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(condition(3), st.lists(MESSAGES, min_size=1, max_size=5))
def test_the_compiled_predicate_agrees_with_the_interpreter(text, messages):
    selector = compile_selector(text)
    tree = parse(text)
    for message in messages:
        expected = evaluate(tree, message) is True
        assert selector.match(message) is expected, (text, message, selector.source)


@settings(max_examples=1500, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab1.'()=<>+-*/ %_!\\eEx,NOTANDORLIKEIN")), max_size=40)
)
def test_any_text_compiles_or_is_refused_with_a_position(text):
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert 0 <= error.position <= len(text)
        assert error.pointer().split("\n")[1].endswith("^")
        return
    assert isinstance(selector.match(Msg({"a": "1", "b": "x"})), bool)
