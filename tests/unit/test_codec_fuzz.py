"""Property tests of the decoder: no lost frame boundary, no error but ProtocolError, and
the C fast path agreeing with the Python decoder on any input."""

import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.defaults import LIMITS, decoder
from wiremq.modules.stomp import codec
from wiremq.modules.stomp.codec import DecoderLimits, FrameDecoder, escape
from wiremq.modules.stomp.encoder import encode_frame, escaped_message_tail, plain_message_tail
from wiremq.modules.stomp.events import Send
from wiremq.modules.stomp.frames import Frame, ProtocolError

FUZZ = settings(max_examples=300, deadline=None)

COMMANDS = ["SEND", "MESSAGE", "SUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "RECEIPT", "ERROR"]

# What a header may hold in each version without breaking the frame: 1.0 escapes
# nothing, 1.1 cannot carry a CR, 1.2 escapes everything special.
EXCLUDED = {"1.0": "\n\r:", "1.1": "\r", "1.2": ""}


def text(version: str, *, value: bool) -> st.SearchStrategy[str]:
    excluded = EXCLUDED[version].replace(":", "") if value else EXCLUDED[version]
    specials = st.sampled_from([c for c in "\\\n\r:" if c not in excluded])
    chars = st.characters(codec="utf-8", exclude_characters=excluded) | specials
    return st.text(chars, max_size=12)


@st.composite
def frames(draw, version: str, styles: list[str]) -> tuple[bytes, Frame]:
    """One encoded frame, with an EOL style and framing drawn, and the frame it must decode to."""
    command = draw(
        st.sampled_from(COMMANDS)
        | st.from_regex(r"[A-Z]{1,10}", fullmatch=True).filter(
            lambda c: not c.startswith("CONNECT")
        )
    )
    names = text(version, value=False).filter(lambda n: n != "content-length")
    headers = draw(st.lists(st.tuples(names, text(version, value=True)), max_size=5))
    body = draw(st.binary(max_size=64) | st.binary(max_size=4).map(lambda b: b"\0" + b + b"\0"))
    expected = {}
    for name, value in headers:
        expected.setdefault(name, value)
    style = draw(st.sampled_from(styles))
    if style == "encode_frame":
        wire = encode_frame(command, headers, body, version)
        if body or command in ("SEND", "MESSAGE", "ERROR"):
            expected.setdefault("content-length", str(len(body)))
        return wire, Frame(command, expected, body)
    if style == "no-length":
        body = body.replace(b"\0", b"")
    eol = "\r\n" if style == "crlf" else "\n"
    lines = [command] + [f"{escape(n, version)}:{escape(v, version)}" for n, v in headers]
    if style == "crlf":
        lines.append(f"content-length:{len(body)}")
        expected.setdefault("content-length", str(len(body)))
    wire = (eol.join(lines) + eol + eol).encode() + body + b"\0"
    return wire, Frame(command, expected, body)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@st.composite
def streams(draw, styles: list[str]) -> tuple[str, list[bytes], list[Frame]]:
    version = draw(st.sampled_from(["1.0", "1.1", "1.2"]))
    encoded = draw(st.lists(frames(version, styles), min_size=1, max_size=6))
    heart_beats = st.sampled_from([b"", b"\n", b"\r\n", b"\n\n"])
    data = b"".join(draw(heart_beats) + wire for wire, _ in encoded) + draw(heart_beats)
    cuts = draw(st.lists(st.integers(min_value=0, max_value=len(data)), max_size=12))
    return version, chunked(data, cuts), [frame for _, frame in encoded]


def decode_all(version: str, pieces: list[bytes]) -> list[Frame]:
    decoder = FrameDecoder(LIMITS)
    decoder.version = version
    decoded = []
    for piece in pieces:
        decoded += decoder.feed(piece)
    assert decoder.buffered == 0
    return decoded


@FUZZ
@given(streams(["encode_frame", "no-length"]))
def test_any_chunking_of_valid_frames_yields_exactly_those_frames(stream):
    version, pieces, expected = stream
    assert decode_all(version, pieces) == expected


@FUZZ
@given(streams(["crlf", "encode_frame"]))
@example(
    (
        "1.2",
        [b"SEND\r\ncontent-length:1\r\n\r\n\n\0"],
        [Frame("SEND", {"content-length": "1"}, b"\n")],
    )
)
def test_any_chunking_of_valid_crlf_frames_yields_exactly_those_frames(stream):
    version, pieces, expected = stream
    assert decode_all(version, pieces) == expected


STOMPISH = st.sampled_from(
    [
        b"\n",
        b"\r",
        b"\r\n",
        b"\0",
        b":",
        b"\\",
        b"\\c",
        b"\\r",
        b"SEND",
        b"CONNECT",
        b"content-length:",
        b"3",
        b"12",
        b"\xff",
        b"\xc3\xa9",
    ]
)


@FUZZ
@given(
    data=st.lists(STOMPISH | st.binary(max_size=8), max_size=40).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    version=st.sampled_from([None, "1.0", "1.1", "1.2"]),
    limits=st.builds(
        DecoderLimits,
        max_body_bytes=st.integers(0, 64),
        max_headers=st.integers(1, 8),
        max_header_bytes=st.integers(1, 64),
    ),
)
def test_arbitrary_bytes_raise_nothing_but_protocol_error(data, cuts, version, limits):
    decoder = FrameDecoder(limits or LIMITS)
    decoder.version = version
    try:
        for piece in chunked(data, cuts):
            for frame in decoder.feed(piece):
                assert isinstance(frame, Frame)
        if version is None:
            while decoder.feed(b""):
                pass
    except ProtocolError as error:
        assert error.message


def _outcome(
    data: bytes, cuts: list[int], version: str, limits: DecoderLimits, sends: bool = False
):
    """Every frame decoded (with its type: a Frame, or with ``sends`` a Send request) and
    the error (message, detail) the stream ends in, if any."""
    decoder = FrameDecoder(limits, sends)
    decoder.version = version
    decoded: list[tuple[type, tuple]] = []
    try:
        for piece in chunked(data, cuts):
            decoded += [(type(frame), frame) for frame in decoder.feed(piece)]
    except ProtocolError as error:
        return decoded, (error.message, error.detail)
    error = decoder.error  # met behind good frames: kept, raised by the next feed
    if error is not None:
        return decoded, (error.message, error.detail)
    return decoded, decoder.buffered


@FUZZ
@given(
    data=st.lists(STOMPISH | st.binary(max_size=8), max_size=40).map(b"".join)
    | streams(["encode_frame", "no-length", "crlf"]).map(lambda s: b"".join(s[1])),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    version=st.sampled_from(["1.0", "1.1", "1.2"]),
    limits=st.builds(
        DecoderLimits,
        max_body_bytes=st.integers(0, 64),
        max_headers=st.integers(1, 8),
        max_header_bytes=st.integers(1, 64),
    ),
    sends=st.booleans(),
)
@example(data=b"SEND\na:b\n\nxy\0MESSAGE\n\n\0", cuts=[], version="1.2", limits=LIMITS, sends=False)
@example(
    data=b"SEND\ndestination:/q\n\nxy\0SEND\ndestination:\n\n\0SEND\r\ndestination:/q\r\n\r\n\0",
    cuts=[],
    version="1.2",
    limits=LIMITS,
    sends=True,
)
def test_the_c_fast_path_decodes_exactly_as_the_python_decoder(data, cuts, version, limits, sends):
    """With the fast path of _fast.c and without it, the same frames (of the same types)
    and the same error."""
    with_c = _outcome(data, cuts, version, limits, sends)
    with patch.object(codec, "scan", lambda buf, pos, *rest: pos):
        python_only = _outcome(data, cuts, version, limits, sends)
    assert with_c == python_only


def test_the_c_fast_path_takes_plain_frames():
    frames: list[Frame] = []
    wire = b"\nSEND\ndestination:/queue/a\ncontent-length:2\n\nhi\0MESSAGE\nx:\xc3\xa9\n\n\0"
    end = codec.scan(wire, 0, frames, Frame, None, 100, 10, 100)
    assert end == len(wire)
    assert frames == [
        Frame("SEND", {"destination": "/queue/a", "content-length": "2"}, b"hi"),
        Frame("MESSAGE", {"x": "é"}, b""),
    ]
    assert codec.scan(b"SEND\na\\cb:1\n\n\0", 0, [], Frame, None, 100, 10, 100) == 0  # escape


def test_the_c_fast_path_makes_a_send_with_a_destination_the_request():
    decoded: list[tuple] = []
    wire = (
        b"SEND\ndestination:/queue/a\nx:y\n\nhi\0"
        + b"SEND\nx:y\n\n\0"  # no destination: a frame, which the session refuses
        + b"SEND\ndestination:\n\n\0"  # an empty one: the same
        + b"SENDS\ndestination:/queue/a\n\n\0"  # not a SEND
    )
    assert codec.scan(wire, 0, decoded, Frame, Send, 100, 10, 100) == len(wire)
    assert [(type(item), item) for item in decoded] == [
        (Send, Send("/queue/a", {"destination": "/queue/a", "x": "y"}, b"hi")),
        (Frame, Frame("SEND", {"x": "y"}, b"")),
        (Frame, Frame("SEND", {"destination": ""}, b"")),
        (Frame, Frame("SENDS", {"destination": "/queue/a"}, b"")),
    ]
    for send in (dict, list, "Send"):  # made as a tuple of three, or not at all
        with pytest.raises(TypeError, match="tuple type or None"):
            codec.scan(wire, 0, [], Frame, send, 100, 10, 100)


@FUZZ
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    data=st.data(),
)
def test_a_message_tail_decodes_to_its_headers(version, data):
    """The encoder's escaping path agrees with the decoder, and its C fast path, where it
    takes a message, with the escaping path."""
    names = text(version, value=False).filter(lambda n: n not in ("content-length", "x"))
    headers = dict(data.draw(st.lists(st.tuples(names, text(version, value=True)), max_size=5)))
    headers["x"] = "dropped"
    destination = data.draw(text(version, value=True))
    body = data.draw(st.binary(max_size=16))
    args = ("id:1", destination, headers, frozenset({"x"}), body, False)
    tail = escaped_message_tail(*args, version)
    plain = plain_message_tail(*args)
    assert plain is None or plain == tail
    [frame] = decoder(version).feed(b"MESSAGE\nsubscription:1\n" + tail)
    expected = {
        "subscription": "1",
        "message-id": "id:1",
        "redelivered": "false",
        "destination": destination,
    }
    for name, value in headers.items():
        if name != "x":
            expected.setdefault(name, value)
    expected.setdefault("content-length", str(len(body)))
    assert frame == Frame("MESSAGE", expected, body)


@pytest.mark.parametrize("size", [0, 1, 9, 10, 99, 100, 65_536, 1_000_003])
def test_the_c_message_tail_states_the_body_size_of_any_number_of_digits(size):
    body = b"b" * size
    args = ("id-1", "/queue/a", {}, frozenset(), body, False)
    tail = plain_message_tail(*args)
    assert tail is not None and tail == escaped_message_tail(*args, "1.2")
    assert tail.endswith(f"\ncontent-length:{size}\n\n".encode() + body + b"\0")


def test_the_coverage_guided_fuzz_target_runs_clean(tmp_path):
    """A short run of bench/fuzz_codec.py (atheris): the target itself works; the long runs
    that find things are bench runs (bench/README.md)."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parents[2] / "bench" / "fuzz_codec.py"),
            "-runs=3000",
            "-seed=1",
            f"-artifact_prefix={tmp_path}/",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=120,
    )
    output = done.stderr.decode(errors="replace")
    assert done.returncode == 0, output[-3000:]
    assert "Done 3000 runs" in output


def _tight_limits(wires: list[bytes], frames: list[Frame]) -> DecoderLimits:
    """The smallest limits every one of these frames fits: each is at a limit."""
    lines = []
    for wire in wires:
        head = wire[: wire.index(b"\n\n") if b"\r\n\r\n" not in wire else wire.index(b"\r\n\r\n")]
        lines.append([line.removesuffix(b"\r") for line in head.split(b"\n")])
    return DecoderLimits(
        max_body_bytes=max(len(f.body) for f in frames),
        max_headers=max(1, *(len(head) - 1 for head in lines)),
        max_header_bytes=max(len(line) for head in lines for line in head),
    )


@FUZZ
@given(
    version=st.sampled_from(["1.0", "1.1", "1.2"]).flatmap(
        lambda v: st.tuples(
            st.just(v), st.lists(frames(v, ["crlf", "no-length"]), min_size=1, max_size=4)
        )
    ),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
)
def test_frames_at_the_limits_decode_however_they_are_split(version, cuts):
    """An unfinished frame is refused only when it cannot become a valid one: frames that
    are exactly at the limits decode the same whole and in any pieces."""
    version, encoded = version
    wires = [wire for wire, _ in encoded]
    expected = [frame for _, frame in encoded]
    limits = _tight_limits(wires, expected)
    data = b"".join(wires)
    decoded = [(Frame, frame) for frame in expected]
    assert _outcome(data, [], version, limits) == (decoded, 0)
    assert _outcome(data, cuts, version, limits) == (decoded, 0)


@FUZZ
@given(
    data=st.lists(STOMPISH | st.binary(max_size=8), max_size=40).map(b"".join)
    | streams(["encode_frame", "no-length", "crlf"]).map(lambda s: b"".join(s[1])),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    version=st.sampled_from(["1.0", "1.1", "1.2"]),
    fill_from=st.integers(0, 8),
)
@example(data=b"SEND\ncontent-length:3\n\nabc\0SEND\n\n\0", cuts=[24], version="1.2", fill_from=1)
@example(data=b"SEND\ncontent-length:3\n\nabcX", cuts=[23], version="1.2", fill_from=1)
@example(data=b"SEND\ncontent-length:3\n\nab", cuts=[23], version="1.2", fill_from=1)
@example(data=b"SEND\ncontent-length:1\n\nx\0AAA\n\\:\n\n\0", cuts=[23], version="1.1", fill_from=0)
def test_bodies_filled_in_place_decode_exactly_as_joined_ones(data, cuts, version, fill_from):
    """Filling a body as its pieces arrive (any body from ``FILL_FROM`` bytes on) gives the
    same frames and the same error as joining its pieces."""
    joined = _outcome(data, cuts, version, LIMITS)
    with patch.object(codec, "FILL_FROM", fill_from):
        filled = _outcome(data, cuts, version, LIMITS)
    assert filled == joined
