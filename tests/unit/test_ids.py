"""Message and session ids (``modules/ids.py``, made in C by ``_message.c``'s
``Numbered``): one after the other, each its own, under the run's random prefix."""

from __future__ import annotations

import re
import sys

import pytest

from wiremq.modules._message import Numbered
from wiremq.modules.ids import Ids


def test_message_and_session_ids_count_up_under_one_random_prefix():
    ids, other = Ids(), Ids()
    messages = [ids.message() for _ in range(100_000)]
    prefix = messages[0].removesuffix("1")
    assert re.fullmatch(r"wmq-[0-9a-f]{8}-", prefix)
    assert messages == [f"{prefix}{number}" for number in range(1, 100_001)]
    assert [ids.session(), ids.session()] == [f"{prefix}s1", f"{prefix}s2"]
    assert other.message() != messages[0]  # another run: another prefix
    assert all(type(id_) is str and id_.isascii() for id_ in messages[::9_999])


def test_a_counter_takes_an_ascii_prefix_and_no_arguments_when_called():
    counter = Numbered(prefix="p-")
    assert counter() == "p-1"
    with pytest.raises(TypeError, match="takes no arguments"):
        counter(1)
    with pytest.raises(ValueError, match="not ASCII"):
        Numbered("ü-")
    with pytest.raises(TypeError):
        Numbered(b"p-")
    prefix = "".join(["q", "-"])  # a str of its own, to count its references
    before = sys.getrefcount(prefix)
    counter = Numbered(prefix)
    assert sys.getrefcount(prefix) == before + 1
    del counter
    assert sys.getrefcount(prefix) == before
