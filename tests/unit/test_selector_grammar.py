"""The JMS selector grammar, rule by rule, with every example of the JMS specification's
selector section (1.1, 3.8.1.1), and the errors a SUBSCRIBE gets for bad selectors."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from wiremq.modules.selector import SelectorError, compile_selector
from wiremq.modules.selector.values import number


@dataclass
class Msg:
    """What a selector reads of a message."""

    headers: dict[str, str] = field(default_factory=dict)
    priority: int = 4
    timestamp: int = 1_700_000_000_000
    message_id: str = "ID:1"
    persistent: bool = False
    redelivered: bool = False
    expires: int = 0
    redeliveries: int = 0


def selects(selector: str, **headers: str) -> bool:
    return compile_selector(selector).match(Msg(headers))


# -- the examples of the JMS specification ---------------------------------------------------


def test_spec_car_example():
    selector = "JMSType = 'car' AND color = 'blue' AND weight > 2500"
    assert selects(selector, type="car", color="blue", weight="3000")
    assert not selects(selector, type="car", color="blue", weight="2500")
    assert not selects(selector, type="truck", color="blue", weight="3000")
    assert not selects(selector, type="car", color="blue")  # weight unknown


@pytest.mark.parametrize(
    ("selector", "age", "expected"),
    [
        ("age BETWEEN 15 AND 19", "15", True),
        ("age BETWEEN 15 AND 19", "19", True),
        ("age BETWEEN 15 AND 19", "20", False),
        ("age >= 15 AND age <= 19", "17", True),
        ("age NOT BETWEEN 15 AND 19", "14", True),
        ("age NOT BETWEEN 15 AND 19", "17", False),
        ("age < 15 OR age > 19", "20", True),
    ],
)
def test_spec_between_examples(selector, age, expected):
    assert selects(selector, age=age) is expected


def test_spec_between_equivalences():
    for age in ("10", "15", "17", "19", "25", "x"):
        assert selects("age BETWEEN 15 AND 19", age=age) == selects(
            "age >= 15 AND age <= 19", age=age
        )
        assert selects("age NOT BETWEEN 15 AND 19", age=age) == selects(
            "age < 15 OR age > 19", age=age
        )


@pytest.mark.parametrize(
    ("selector", "country", "expected"),
    [
        ("Country IN ('UK', 'US', 'France')", "UK", True),
        ("Country IN ('UK', 'US', 'France')", "Peru", False),
        ("(Country = 'UK') OR (Country = 'US') OR (Country = 'France')", "UK", True),
        ("Country NOT IN ('UK', 'US', 'France')", "UK", False),
        ("Country NOT IN ('UK', 'US', 'France')", "Peru", True),
        ("NOT ((Country = 'UK') OR (Country = 'US') OR (Country = 'France'))", "Peru", True),
        # the specification writes ' UK' with a space: a different string
        ("Country IN (' UK', 'US', 'France')", "UK", False),
    ],
)
def test_spec_in_examples(selector, country, expected):
    assert selects(selector, Country=country) is expected


def test_in_and_not_in_of_a_missing_property_are_unknown():
    assert not selects("Country IN ('UK')")
    assert not selects("Country NOT IN ('UK')")


@pytest.mark.parametrize(
    ("selector", "value", "expected"),
    [
        ("phone LIKE '12%3'", "123", True),
        ("phone LIKE '12%3'", "12993", True),
        ("phone LIKE '12%3'", "1234", False),
        ("word LIKE 'l_se'", "lose", True),
        ("word LIKE 'l_se'", "loose", False),
        ("underscored LIKE '\\_%' ESCAPE '\\'", "_foo", True),
        ("underscored LIKE '\\_%' ESCAPE '\\'", "bar", False),
        ("phone NOT LIKE '12%3'", "123", False),
        ("phone NOT LIKE '12%3'", "12993", False),
        ("phone NOT LIKE '12%3'", "1234", True),
    ],
)
def test_spec_like_examples(selector, value, expected):
    name = selector.split()[0]
    assert selects(selector, **{name: value}) is expected


def test_spec_is_null_examples():
    assert selects("prop_name IS NULL")
    assert not selects("prop_name IS NULL", prop_name="x")
    assert selects("prop_name IS NOT NULL", prop_name="")
    assert not selects("prop_name IS NOT NULL")


def test_spec_news_type_example():
    selector = "NewsType = 'Opinion' OR NewsType = 'Sports'"
    assert selects(selector, NewsType="Sports") and not selects(selector, NewsType="Weather")


# -- literals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("s = 'literal'", True),
        ("t = 'literal''s'", True),
        ("n = 57", True),
        ("m = -957", True),
        ("p = +62", True),
        ("a = 7E3", True),
        ("b = -57.9E2", True),
        ("c = 7.", True),
        ("d = -95.7", True),
        ("e = +6.2", True),
        ("f = .5", True),
        ("n = 57L", True),
        ("x = 0x1F", True),
        ("o = 010", True),  # octal, as in Java
        ("g = 2.5f", True),
        ("TRUE", True),
        ("FALSE", False),
        ("true AND True", True),
    ],
)
def test_literals(selector, expected):
    headers = {
        "s": "literal",
        "t": "literal's",
        "n": "57",
        "m": "-957",
        "p": "62",
        "a": "7000",
        "b": "-5790",
        "c": "7",
        "d": "-95.7",
        "e": "6.2",
        "f": "0.5",
        "x": "31",
        "o": "8",
        "g": "2.5",
    }
    assert selects(selector, **headers) is expected


def test_keywords_are_case_insensitive_and_identifiers_are_not():
    assert selects("a = 1 and NOT b = 2 Or c is null", a="1", b="3")
    assert selects("Color = 'red'", Color="red") and not selects("Color = 'red'", color="red")


def test_identifiers_may_hold_dollar_underscore_and_unicode_letters():
    assert selects(
        "$x = 1 AND _y = 2 AND prénom = 'Zoé'", **{"$x": "1", "_y": "2", "prénom": "Zoé"}
    )


def test_whitespace_of_every_kind_separates_tokens():
    assert selects("a\t=\n1\r\fAND  b=2", a="1", b="2")


# -- arithmetic and comparison ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("a + b * c = 7", True),
        ("(a + b) * c = 9", True),
        ("-a = -1", True),
        ("- -a = 1", True),
        ("c / b = 1", True),  # exact numbers divide as in Java: 3 / 2 = 1
        ("c / 2.0 = 1.5", True),
        ("-c / b = -1", True),  # truncated toward zero
        ("a / 0 = 0", False),  # exact division by zero is unknown
        ("NOT (a / 0 = 0)", False),
        ("c / 0.0 > 1000000", True),  # approximate: infinite
        ("a - b - c = -4", True),  # left to right
        ("c - b - a = 0", True),
        ("a < b AND b <= 2 AND c > b AND c >= 3 AND a <> b", True),
        ("a = 1.0", True),  # exact and approximate compare by value
        ("d > 1", False),  # not a number: unknown
        ("NOT d > 1", False),
    ],
)
def test_arithmetic_and_comparisons(selector, expected):
    assert selects(selector, a="1", b="2", c="3", d="abc") is expected


def test_numeric_rule_for_header_values():
    assert selects("price > 100", price="150")
    assert selects("price > 100", price="100.5")
    assert selects("price > 100", price="1e3")
    assert not selects("price > 100", price="0x1F0")  # only decimal text is a number
    assert not selects("price > 100", price=" 150")
    assert not selects("price > 100", price="1_000")
    assert not selects("price > 100", price="")
    assert selects("code = '007'", code="007") and not selects("code = '7'", code="007")
    assert selects("code = 7", code="007") and selects("code = 7", code="7.0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("150", 150),
        ("-7", -7),
        ("+42", 42),
        ("007", 7),
        ("\u0661\u0662", 12),  # Unicode decimal digits are digits (Python's \\d, int())
        ("3.5", 3.5),
        ("1.", 1.0),
        (".5", 0.5),
        ("-.5E-2", -0.005),
        ("1e3", 1000.0),
        ("2E+2", 200.0),
        ("1e999", float("inf")),
        (None, None),
        ("", None),
        ("+", None),
        ("-", None),
        (".", None),
        ("+.", None),
        (".e5", None),
        ("e5", None),
        ("1e", None),
        ("1e+", None),
        ("1.5e", None),
        ("1.2.3", None),
        (" 150", None),
        ("150 ", None),
        ("150\n", None),
        ("1_000", None),
        ("0x1F", None),
        ("\u00b2", None),  # a digit (str.isdigit) that is no decimal digit
        ("1\u00b2", None),
        ("abc", None),
        ("--1", None),
    ],
)
def test_the_numeric_rule_exactly(text, expected):
    """``number`` (in C): the whole text a JMS numeric literal in decimal, exact without a
    point or exponent; anything else unknown (None)."""
    value = number(text)
    assert value == expected and type(value) is type(expected)


def test_number_refuses_what_is_not_text():
    with pytest.raises(TypeError, match="str or None"):
        number(150)  # type: ignore[arg-type]


def test_a_header_that_is_no_number_is_unknown_in_every_comparison_with_one():
    """Three-valued logic over the numeric rule: NOT of unknown is unknown, FALSE AND
    unknown is false, TRUE OR unknown is true."""
    for price in ("abc", "", " 1", "1e"):
        assert not selects("price > 100", price=price)
        assert not selects("NOT (price > 100)", price=price)
        assert not selects("price <= 100", price=price)
        assert not selects("price BETWEEN 0 AND 1000", price=price)
        assert not selects("price NOT BETWEEN 0 AND 1000", price=price)
        assert selects("price > 100 OR a = 1", price=price, a="1")
        assert not selects("NOT (price > 100 AND a = 1)", price=price, a="1")
        assert selects("NOT (price > 100 AND a = 1)", price=price, a="2")
        assert selects("price IS NOT NULL", price=price)
    assert not selects("NOT (price > 100)")  # absent: NULL


def test_two_properties_compare_as_numbers_when_both_are_else_as_text():
    assert selects("a = b", a="7", b="7.0")
    assert selects("a < b", a="9", b="10")  # numbers, not text
    assert selects("a = b", a="x", b="x") and selects("a <> b", a="x", b="y")
    assert not selects("a < b", a="x", b="y")  # text is not ordered: unknown
    assert not selects("a = b", a="x")


def test_boolean_properties_and_comparisons():
    assert selects("flag", flag="true") and selects("flag = TRUE", flag="TRUE")
    assert selects("NOT flag", flag="false") and not selects("flag", flag="yes")
    assert not selects("NOT flag", flag="yes")  # unknown
    assert selects("(a > 1) = TRUE", a="2") and selects("(a > 1) <> TRUE", a="0")
    assert not selects("(a > 1) = FALSE", a="x")  # unknown = FALSE is unknown


# -- three-valued logic: the specification's tables ------------------------------------------

TRUE, FALSE, UNKNOWN = "t = 1", "t = 2", "u = 1"  # t is 1, u is absent


@pytest.mark.parametrize(
    ("left", "right", "expected_and", "expected_or"),
    [
        (TRUE, TRUE, True, True),
        (TRUE, FALSE, False, True),
        (TRUE, UNKNOWN, None, True),
        (FALSE, FALSE, False, False),
        (FALSE, UNKNOWN, False, None),
        (UNKNOWN, UNKNOWN, None, None),
    ],
)
def test_and_or_truth_tables(left, right, expected_and, expected_or):
    for operator, expected in (("AND", expected_and), ("OR", expected_or)):
        for a, b in ((left, right), (right, left)):
            expression = f"({a}) {operator} ({b})"
            assert selects(expression, t="1") is (expected is True)
            assert selects(f"NOT ({expression})", t="1") is (expected is False)


def test_not_truth_table():
    assert selects(f"NOT ({FALSE})", t="1") and not selects(f"NOT ({TRUE})", t="1")
    assert not selects(f"NOT ({UNKNOWN})", t="1") and not selects(UNKNOWN, t="1")


# -- JMS header fields -----------------------------------------------------------------------


def test_jms_header_fields():
    message = Msg(
        {"correlation-id": "c-1", "type": "order"},
        priority=7,
        timestamp=1000,
        message_id="ID:42",
        persistent=True,
        redelivered=True,
        redeliveries=2,
    )
    selector = (
        "JMSPriority = 7 AND JMSTimestamp = 1000 AND JMSMessageID = 'ID:42' AND "
        "JMSCorrelationID = 'c-1' AND JMSType = 'order' AND JMSDeliveryMode = 'PERSISTENT' "
        "AND JMSRedelivered AND JMSXDeliveryCount = 3 AND JMSExpiration = 0"
    )
    assert compile_selector(selector).match(message)
    assert compile_selector("JMSCorrelationID IS NULL").match(Msg())
    assert compile_selector("JMSDeliveryMode = 'NON_PERSISTENT'").match(Msg())
    assert not compile_selector("JMSRedelivered = TRUE").match(Msg())


def test_the_same_text_is_compiled_once():
    assert compile_selector("a = 1") is compile_selector("a = 1")


def test_top_level_equalities_are_found_for_indexing():
    selector = compile_selector("region = 'EU' AND shard = 3 AND price > 100 AND 'x' = y")
    assert selector.equalities == [("region", "EU"), ("shard", 3), ("y", "x")]
    assert compile_selector("a = 1 OR b = 2").equalities == []


# -- errors point at their position ----------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "position", "reason"),
    [
        ("a >", 3, "expected a value"),
        ("a = 1 AND", 9, "expected a value"),
        ("a = 'x", 4, "string not closed"),
        ("a = 1 b = 2", 6, "unexpected identifier 'b'"),
        ("a != 1", 2, "'!=' is written '<>'"),
        ('a = "x"', 4, "single quotes"),
        ("a = 1 ; DROP", 6, "unexpected character ';'"),
        ("'a' < 'b'", 4, "< compares numbers"),
        ("x > TRUE", 2, "< compares numbers".replace("<", ">")),
        ("a = 'x' + 1", 4, "+ needs numbers"),
        ("'x' = 1", 4, "cannot compare a number with a string"),
        ("a + 1", 0, "must be a condition"),
        ("NOT 5", 4, "NOT needs a condition"),
        ("a = 1 AND 2", 10, "AND needs a condition"),
        ("a LIKE 5", 7, "LIKE takes string literals"),
        ("a LIKE 'x' ESCAPE 'ab'", 18, "one character"),
        ("a LIKE 'x!' ESCAPE '!'", 7, "ends with its escape"),
        ("a IN (1)", 6, "IN takes string literals"),
        ("a IN ('x' 'y')", 10, "expected ) or ,"),
        ("5 IN ('x')", 0, "IN applies to an identifier"),
        ("JMSPriority LIKE '4%'", 0, "JMSPriority is a number"),
        ("a NOT = 1", 2, "NOT here must be followed"),
        ("a IS 1", 5, "expected NULL"),
        ("a BETWEEN 1 OR 2", 12, "expected AND"),
        ("a BETWEEN 'x' AND 2", 10, "BETWEEN needs numbers"),
        ("AND = 1", 0, "reserved word"),
        ("(a = 1", 6, "expected a closing )"),
        ("a = 1)", 5, "unexpected operator ')'"),
        ("a = 12abc", 4, "malformed number"),
        ("a = 09", 4, "not an octal number"),
        ("", 0, "expected a value"),
        ("(" * 45 + "a = 1" + ")" * 45, 40, "nested too deeply"),
        ("a = " + "-" * 45 + "1", 44, "nested too deeply"),
        ("a = 1" + " + 1" * 45, 166, "nested too deeply"),
    ],
)
def test_errors_name_the_position(selector, position, reason):
    with pytest.raises(SelectorError) as caught:
        compile_selector(selector)
    error = caught.value
    assert reason in error.reason
    assert error.position == position, error
    assert str(error).endswith(f"at position {position + 1}")
    text, caret = error.pointer().split("\n")
    assert caret == " " * position + "^"


def test_long_flat_conditions_compile():
    selector = " OR ".join(f"k = 'v{i}'" for i in range(500))
    assert selects(selector, k="v499") and not selects(selector, k="v500")
